"""The embedded model's tokenizer fits the envs and is the one every shipped checkpoint was trained with."""

from pathlib import Path

import pytest
from safetensors.torch import load_file

from memrl_envs import multihop
from memrl.models.tiny import (
    DEFAULT_TOKENIZER,
    TinyModelConfig,
    bpe_model,
    build_tokenizer,
    default_corpus,
    default_model,
    default_tokenizer,
)

CHECKPOINTS = Path(__file__).resolve().parents[2] / "tuned_examples" / "checkpoints"
SHIPPED = sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "tokenizer.json").is_file())


def test_multihop_names_are_single_tokens():
    tok = default_tokenizer()
    names = set()
    for seed in range(100):
        for doc in multihop.make_task(seed).documents:
            names.update(w.strip(".") for w in doc.split()[2:] if w[0].isupper())
    assert len(names) > 50
    multi = [n for n in names if len(tok(" " + n, add_special_tokens=False)["input_ids"]) != 1]
    assert multi == []


@pytest.mark.parametrize("checkpoint", SHIPPED)
def test_shipped_checkpoints_use_the_default_tokenizer(checkpoint):
    assert bpe_model(CHECKPOINTS / checkpoint / "tokenizer.json") == bpe_model(DEFAULT_TOKENIZER)


def test_default_model_is_rebuilt_when_its_tokenizer_is_another(tmp_path):
    path = Path(default_model(tmp_path / "tiny"))
    assert bpe_model(path / "tokenizer.json") == bpe_model(DEFAULT_TOKENIZER)
    weights = load_file(path / "model.safetensors")
    other = build_tokenizer(default_corpus(), vocab_size=len(default_tokenizer()))  # trained on other text
    other.save_pretrained(path)
    assert bpe_model(path / "tokenizer.json") != bpe_model(DEFAULT_TOKENIZER)
    default_model(path)
    assert bpe_model(path / "tokenizer.json") == bpe_model(DEFAULT_TOKENIZER)
    rebuilt = load_file(path / "model.safetensors")
    assert all((rebuilt[k] == v).all() for k, v in weights.items())


def test_default_model_of_another_depth(tmp_path):
    deep = Path(default_model(tmp_path / "deep", TinyModelConfig(num_layers=6)))
    base = Path(default_model(tmp_path / "base"))
    layers = {p: {k.split(".")[2] for k in load_file(p / "model.safetensors") if k.startswith("model.layers.")}
              for p in (deep, base)}
    assert (len(layers[deep]), len(layers[base])) == (6, 4)
    assert bpe_model(deep / "tokenizer.json") == bpe_model(DEFAULT_TOKENIZER)
