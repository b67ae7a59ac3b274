"""The light reference inference engine: a transformers causal LM with a KV cache and batched sampling."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from memrl.engines.base import GenerationOutput, InferenceEngine, SamplingConfig
from memrl.weight_sync import BucketReceiver, TensorMeta, init_group, receive_into

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Model dtypes the engine accepts, by name."""


class TorchEngine(InferenceEngine):
    """Token-in, token-out generation with a Hugging Face model, seeded per engine.

    The same seed and the same calls in the same order give identical outputs. Logprobs are
    those of the raw model distribution (temperature 1, no top-p), as the learner recomputes them; with
    `tempered_logprobs` those of softmax(logits / temperature), the distribution a token was sampled from (no top-p;
    greedy calls keep the raw ones).
    Generation ends only on `sampling.stop_token_ids` or `max_tokens`; the model's EOS is not implied.
    `device` defaults to the GPU where one is visible, else the CPU; `max_model_len` (prompt and reply together)
    to the model's positions.
    """

    def __init__(
        self,
        model_path: str | Path,
        seed: int = 0,
        dtype: str = "float32",
        device: str | None = None,
        max_batch_size: int = 64,
        max_model_len: int | None = None,
        tempered_logprobs: bool = False,
    ) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"TorchEngine dtype {dtype!r} is not supported; allowed: {sorted(DTYPES)}")
        if max_batch_size < 1:
            raise ValueError(f"TorchEngine max_batch_size must be >= 1, got {max_batch_size}")
        # Inside a Ray actor CUDA is visible only where the actor reserved a GPU.
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.max_batch_size = max_batch_size
        self.tempered_logprobs = bool(tempered_logprobs)
        # Imported here, not with the module: the driver imports this class only to check its options.
        from memrl.engines import hf_model

        # On GPUs transformers' sdpa picks fused kernels, which take grouped-query attention only without a mask.
        attention = hf_model.CPU_ATTENTION if self.device.type == "cpu" else "sdpa"
        self.model = hf_model.load(model_path, DTYPES[dtype], attention)
        self._kv_cache = hf_model.kv_cache
        self.model.to(self.device).eval().requires_grad_(False)
        self.vocab_size: int = self.model.config.get_text_config().vocab_size
        positions = self.model.config.get_text_config().max_position_embeddings
        if max_model_len is not None and not 0 < max_model_len <= positions:
            raise ValueError(f"TorchEngine max_model_len must be in 1..{positions} (the model's positions), "
                             f"got {max_model_len}")
        self._max_model_len: int = max_model_len or positions
        self.pad_id = _pad_id(self.model.config)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.weight_version = 0
        self._sync_group = None

    def max_model_len(self) -> int:
        return self._max_model_len

    def check_prompts(self, prompts: list[list[int]]) -> None:
        for i, prompt in enumerate(prompts):
            self._check_ids(prompt, f"prompt {i}")
            if len(prompt) >= self._max_model_len:
                raise ValueError(f"prompt {i} has {len(prompt)} tokens; the model holds {self._max_model_len} "
                                 f"(max_model_len), so a prompt may have at most {self._max_model_len - 1}")

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        """Sample one response per prompt, in batches of at most `max_batch_size` prompts."""
        self.check_prompts(prompts)
        outputs: list[GenerationOutput] = []
        for start in range(0, len(prompts), self.max_batch_size):
            outputs.extend(self._generate_batch(prompts[start : start + self.max_batch_size], sampling))
        return outputs

    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[GenerationOutput]:
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        # Left padding puts every row's last prompt token in the same column, so one decode step
        # serves the whole batch; the mask hides pads and position ids restart at each row's first token.
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((batch, width), dtype=torch.long, device=self.device)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        layers = self.model.config.get_text_config().num_hidden_layers
        cache = self._kv_cache(layers, width + sampling.max_tokens)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

        stop_ids = torch.tensor(sampling.stop_token_ids, dtype=torch.long, device=self.device)
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        stopped = torch.zeros(batch, dtype=torch.bool, device=self.device)
        # A row also ends ("length") when its sequence fills the model's positions.
        room = torch.tensor([self._max_model_len - len(p) for p in prompts], device=self.device)
        scale = sampling.temperature if self.tempered_logprobs and sampling.temperature > 0 else 1.0
        for step in range(sampling.max_tokens):
            logits = logits.float()
            next_ids = self._sample(logits, sampling)
            raw = torch.log_softmax(logits / scale, dim=-1).gather(-1, next_ids[:, None])[:, 0]
            active = (~finished).nonzero()[:, 0].tolist()
            for row, tok, lp in zip(active, next_ids[active].tolist(), raw[active].tolist()):
                tokens[row].append(tok)
                logprobs[row].append(lp)
            stopped |= ~finished & torch.isin(next_ids, stop_ids)
            finished |= stopped | (room <= step + 1)
            if bool(finished.all()) or step == sampling.max_tokens - 1:
                break
            # Finished rows keep stepping (feeding pads) so the batch stays rectangular; their
            # samples are discarded above.
            next_ids = next_ids.masked_fill(finished, self.pad_id)
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=self.device)], dim=-1)
            positions = positions[:, -1:] + 1
            logits = self.model(
                input_ids=next_ids[:, None],
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]

        return [
            GenerationOutput(
                token_ids=tokens[row],
                logprobs=logprobs[row],
                finish_reason="stop" if stopped[row] else "length",
                weight_version=self.weight_version,
            )
            for row in range(batch)
        ]

    def _sample(self, logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """One token id per row from float32 logits [B, V]."""
        if sampling.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / sampling.temperature, dim=-1)
        if sampling.top_p < 1:
            # Nucleus: keep the smallest prefix of the sorted distribution whose mass reaches top_p
            # (the most likely token always survives).
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
            sorted_probs = sorted_probs.masked_fill(mass_before >= sampling.top_p, 0.0)
            return order.gather(-1, self._draw(sorted_probs)[:, None])[:, 0]
        return self._draw(probs)

    def _draw(self, weights: torch.Tensor) -> torch.Tensor:
        """One index per row of [B, V] non-negative weights, with probability proportional to its weight: the first
        index whose running sum passes a uniform draw scaled to the row's total. One random number per row, where
        torch.multinomial draws a vocabulary's worth (most of a decode step's sampling time on CPU)."""
        running = weights.double().cumsum(dim=-1)
        draw = torch.rand((weights.shape[0], 1), generator=self.generator, device=weights.device,
                          dtype=torch.float64) * running[:, -1:]
        return torch.searchsorted(running, draw, right=True)[:, 0].clamp_(max=weights.shape[-1] - 1)

    @torch.inference_mode()
    def reseed(self, seed: int) -> None:
        """Restart the sampling generator."""
        self.generator.manual_seed(seed)

    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        """Logprob of each continuation token given the prompt and the tokens before it (one forward)."""
        self._check_ids(prompt_ids, "prompt_ids")
        if not continuation_ids:
            return []
        self._check_ids(continuation_ids, "continuation_ids")
        ids = torch.tensor([prompt_ids + continuation_ids], dtype=torch.long, device=self.device)
        # Only the positions that predict continuation tokens are needed.
        logits = self.model(input_ids=ids, logits_to_keep=len(continuation_ids) + 1).logits[0, :-1].float()
        targets = ids[0, len(prompt_ids) :, None]
        return torch.log_softmax(logits, dim=-1).gather(-1, targets)[:, 0].tolist()

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy (HF parameter name, tensor) pairs into the model's parameters in place and set the version.

        Tensors are applied as they arrive, so a bad name or shape stops the load part way with an error.
        """
        params = dict(self.model.named_parameters())
        for name, tensor in named_tensors:
            param = params.get(name)
            if param is None:
                known = ", ".join(list(params)[:5])
                raise KeyError(
                    f"load_weights: unknown parameter name {name!r}; the model has {len(params)} parameters "
                    f"named like: {known}, ..."
                )
            if tuple(tensor.shape) != tuple(param.shape):
                raise ValueError(
                    f"load_weights: parameter {name!r} has shape {tuple(param.shape)}, got a tensor of shape "
                    f"{tuple(tensor.shape)}"
                )
            param.copy_(tensor)
        self.weight_version = version

    def init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        """Join the weight-sync process group whose rank 0 is the learner (blocks until all ranks join)."""
        self._sync_group = init_group(host, port, rank, world_size, backend)
        self._receiver = BucketReceiver(self._sync_group, self.device)  # load_weights copies each tensor at once

    def receive_weights(self, metas: list[TensorMeta], version: int, bucket_bytes: int) -> None:
        """Receive a broadcast from rank 0 straight into the model's parameters (no copy) when they have the sender's
        dtype; a model of another dtype (bfloat16 beside a float32 learner) takes each tensor by a copy."""
        if self._sync_group is None:
            raise RuntimeError("receive_weights needs a weight-sync group: call init_weight_sync first")
        params = {name: p.data for name, p in self.model.named_parameters()}
        if all(name in params and str(params[name].dtype).removeprefix("torch.") == dtype for name, _, dtype in metas):
            receive_into(self._sync_group, params, metas)
            self.weight_version = version
        else:
            self.load_weights(self._receiver.receive(metas, bucket_bytes), version)

    def _check_ids(self, ids: list[int], what: str) -> None:
        if not ids:
            raise ValueError(f"{what} is empty; it needs at least one token id")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"{what} has token ids {bad[:5]} outside the vocabulary [0, {self.vocab_size})")


def _pad_id(config) -> int:
    """The id fed at padded positions; any valid id works because the attention mask hides it."""
    for candidate in (getattr(config, "pad_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(candidate, list):
            candidate = candidate[0] if candidate else None
        if candidate is not None:
            return int(candidate)
    return 0
