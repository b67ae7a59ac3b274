"""What the torch engine takes from transformers: a causal LM loaded quietly, the attention it runs on CPU, and a KV
cache filled in place. The engine imports this module when it is built: the driver imports the engine class only to
check its options, and transformers' modelling code takes about 2 s of CPU to import."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoModelForCausalLM, Cache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.utils import logging as hf_logging

from memrl.console import verbose

CPU_ATTENTION = "memrl_sdpa_gqa"
"""The attention the engine runs on CPU: torch's scaled_dot_product_attention with grouped-query attention done by the
kernel. transformers' "sdpa" copies every key/value head once per query head whenever a padding mask is given (each
decode step of a left-padded batch), so the KV cache is copied in every layer at every step."""


@contextmanager
def _quiet_loading():
    """transformers' "Loading weights" progress bar off while a model loads, unless verbose(): an engine built in the
    driver (SFT's evaluation) would print it between memrl's own progress bars."""
    quiet = hf_logging.is_progress_bar_enabled() and not verbose()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet:  # undo only what was changed here
            hf_logging.enable_progress_bar()


def _sdpa_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
                                         is_causal=causal, enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(CPU_ATTENTION, _sdpa_gqa)
AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)


class _PreallocatedLayer(DynamicLayer):
    """One layer's KV cache in buffers sized for the whole call: each step writes its keys and values in place and
    the attention reads a view of the filled part, where transformers' DynamicLayer concatenates (a copy of the layer's
    whole cache at every step)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self._length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self._keys = key_states.new_empty((*key_states.shape[:2], self.capacity, key_states.shape[3]))
            self._values = value_states.new_empty((*value_states.shape[:2], self.capacity, value_states.shape[3]))
            self.is_initialized = True
        end = self._length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache of {self.capacity} positions cannot take position {end}")
        self._keys[:, :, self._length : end] = key_states
        self._values[:, :, self._length : end] = value_states
        self._length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values


def load(model_path: str | Path, dtype: torch.dtype, attention: str):
    """The causal LM at `model_path` in `dtype` with `attention` (CPU_ATTENTION or a transformers name), without
    transformers' progress bar."""
    with _quiet_loading():
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation=attention)


def kv_cache(num_layers: int, capacity: int) -> Cache:
    """A cache of `num_layers` layers that holds `capacity` positions per row, allocated at its first write."""
    return Cache(layers=[_PreallocatedLayer(capacity) for _ in range(num_layers)])
