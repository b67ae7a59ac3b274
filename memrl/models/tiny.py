"""The embedded default model: a tiny Qwen2-architecture causal LM with a locally trained tokenizer
(`default_model()` builds the one the tuned examples start from, with the tokenizer kept in tiny_tokenizer.json).

Built deterministically from a seed and saved as a normal Hugging Face checkpoint, so
transformers, vLLM and DeepSpeed load it like any other Qwen2 model. Embeddings are untied:
vLLM's in-place weight reload breaks a tie.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]

TAG_TOKENS = [
    f"<{t}>" if i == 0 else f"</{t}>"
    for t in ("think", "mem", "memory", "search", "information", "answer", "tool_call", "tool_response", "question")
    for i in (0, 1)
] + ["\\boxed{"]
"""Markup the memory workflows use; each is one token so a tiny model can emit it reliably."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML, as Qwen models use."""


@dataclass
class TinyModelConfig:
    """Size and seed of the embedded model."""

    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads (head dim = hidden_size / num_heads)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention, as Qwen2)."""
    intermediate_size: int = 384
    """Width of the MLP."""
    max_positions: int = 4096
    """Longest context the model is built for."""
    vocab_size: int = 1024
    """Target tokenizer size, special and tag tokens included."""
    seed: int = 0
    """Seed for weight init; the same seed gives the same weights."""

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"TinyModelConfig.hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"TinyModelConfig.num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})"
            )


def default_corpus(num_lines: int = 4000, seed: int = 0) -> list[str]:
    """Deterministic English-like text with numbers and markup to train the byte-level BPE on."""
    rng = random.Random(seed)
    words = (
        "the a of in on at to from by with and or is was were be has had who what where when which "
        "born lives works worked city country company person document question answer memory previous "
        "updated section problem no final search information think result item product price color size "
        "name river mountain university founded director employer author book capital north south east "
        "west number code key value needle haystack special magic remember find write read true false"
    ).split()
    lines = []
    for _ in range(num_lines):
        n = rng.randint(4, 14)
        parts = [rng.choice(words) if rng.random() > 0.2 else str(rng.randint(0, 9999)) for _ in range(n)]
        if rng.random() < 0.3:
            parts.insert(rng.randint(0, n), rng.choice(TAG_TOKENS))
        lines.append(" ".join(parts).capitalize() + rng.choice([".", "?", ":", "\n"]))
    return lines


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE (any text encodes) with ChatML special tokens and one-token tags."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens(TAG_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer: PreTrainedTokenizerFast, config: TinyModelConfig) -> Qwen2ForCausalLM:
    """A freshly initialised tiny Qwen2 sized to `tokenizer`, identical for identical seeds."""
    hf_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(config.seed)
    return Qwen2ForCausalLM(hf_config).float().eval()


def build_tiny_checkpoint(
    path: str | Path, config: TinyModelConfig | None = None, tokenizer: PreTrainedTokenizerFast | None = None
) -> Path:
    """Write tokenizer + freshly initialised model to `path` as a Hugging Face checkpoint. The tokenizer is
    `tokenizer` when given, else one trained on `default_corpus()`."""
    config = config or TinyModelConfig()
    path = Path(path)
    if tokenizer is None:
        tokenizer = build_tokenizer(default_corpus(), config.vocab_size)
    model = build_model(tokenizer, config)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


DEFAULT_TOKENIZER = Path(__file__).with_name("tiny_tokenizer.json")
"""The default model's tokenizer, every shipped checkpoint's too. build_tokenizer trained it on generic text, the
multihop and NIAH tasks and the MemAgent templates, so entity names and template words are single tokens. It is kept
as a file because retraining renumbers tokens whenever that text changes (a template's wording is enough), and a
checkpoint trained with one numbering reads nonsense through another."""


def default_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer of DEFAULT_TOKENIZER with ChatML's special tokens and template."""
    return PreTrainedTokenizerFast(tokenizer_file=str(DEFAULT_TOKENIZER), eos_token=IM_END, pad_token=PAD_TOKEN,
                                   chat_template=CHAT_TEMPLATE)


def bpe_model(tokenizer_file: str | Path) -> dict:
    """The BPE model (vocabulary and merges) of a tokenizer.json."""
    return json.loads(Path(tokenizer_file).read_text())["model"]


def default_model(path: str | Path = "runs/tiny-model", config: TinyModelConfig | None = None) -> str:
    """The default model (random weights from the seed, DEFAULT_TOKENIZER) at `path`, built there the first time, and
    again if the tokenizer found there is another; the shipped warm-starts were trained from it. `config` builds
    another size instead (keep one path per size: a model already at `path` is not rebuilt for another size)."""
    path = Path(path)
    tokenizer_file = path / "tokenizer.json"
    if not ((path / "config.json").is_file() and tokenizer_file.is_file()
            and bpe_model(tokenizer_file) == bpe_model(DEFAULT_TOKENIZER)):
        build_tiny_checkpoint(path, config, tokenizer=default_tokenizer())
    return str(path)
