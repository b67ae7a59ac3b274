import json
import shutil
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from memrl import tokenizer
from memrl.tokenizer import load_tokenizer, tokenizer_class_path

TEXTS = ["Alice was born in 1987 and 2024.", "<|im_start|>user\nx=3.14159<|im_end|>", "naïve café 北京 12 345"]


def test_named_class_tokenizes_exactly_as_autotokenizer(tiny_checkpoint):
    auto = AutoTokenizer.from_pretrained(tiny_checkpoint)
    class_path = tokenizer_class_path(tiny_checkpoint)
    assert class_path == f"{type(auto).__module__}:{type(auto).__qualname__}"
    # A fresh process, as a runner is: nothing loaded for this path yet.
    code = ("import json, sys\nfrom memrl.tokenizer import load_tokenizer\n"
            f"tok = load_tokenizer({str(tiny_checkpoint)!r}, {class_path!r})\n"
            f"print(json.dumps([type(tok).__name__, [tok.encode(t) for t in {TEXTS!r}], 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    name, ids, torch_loaded = json.loads(out.strip().splitlines()[-1])
    assert name == type(auto).__name__
    assert ids == [auto.encode(t) for t in TEXTS]
    assert not torch_loaded


def test_a_runner_process_loads_its_tokenizer_and_envs_without_torch(tiny_checkpoint):
    code = f"""
import sys
import gymnasium as gym
import memrl_envs
from memrl.tokenizer import load_tokenizer, tokenizer_class_path
import memrl.rollout, memrl.workflows
assert "torch" not in sys.modules, "importing the rollout side loaded torch"
cls = {tokenizer_class_path(tiny_checkpoint)!r}
tok = load_tokenizer({str(tiny_checkpoint)!r}, cls)
env = gym.make("memrl/ChunkStream-v0", task="multihop", num_docs=3, chunk_tokens=24,
               tokenizer_path={str(tiny_checkpoint)!r})
env.reset(seed=0)
assert env.unwrapped.counter.tokenizer is tok, "the env loaded a second tokenizer"
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_a_bad_class_path_names_what_is_expected(tmp_path):
    with pytest.raises(ValueError, match="not an importable tokenizer class.*module:Class"):
        load_tokenizer(tmp_path, "json:dumps")


HEAVY = ("torch", "transformers.models.auto.tokenization_auto", "transformers.models.auto.modeling_auto")
"""What finding the class with AutoTokenizer imports, and loading a known class does not."""


def auto_class_path(path):
    cls = type(AutoTokenizer.from_pretrained(str(path)))
    return f"{cls.__module__}:{cls.__qualname__}"


def test_the_class_is_found_once_per_checkpoint_and_then_loaded_without_the_auto_classes(tiny_checkpoint, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    assert tokenizer_class_path(tiny_checkpoint) == auto_class_path(tiny_checkpoint)
    # A fresh process, as a driver or a runner is: the class comes from the cache, so AutoTokenizer and what it
    # imports stay unloaded, and the tokenizer is AutoTokenizer's.
    code = ("import json, sys\nfrom memrl.tokenizer import load_tokenizer\n"
            f"tok = load_tokenizer({str(tiny_checkpoint)!r})\n"
            f"print(json.dumps([[tok.encode(t) for t in {TEXTS!r}], [m for m in {HEAVY!r} if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    ids, loaded = json.loads(out.strip().splitlines()[-1])
    auto = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert ids == [auto.encode(t) for t in TEXTS]
    assert loaded == []


def test_a_changed_checkpoint_is_looked_up_again(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, copy)
    qwen = tokenizer_class_path(copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    gpt2 = tokenizer_class_path(copy)
    assert gpt2 == auto_class_path(copy) != qwen
    assert len(json.loads((tmp_path / "cache" / "tokenizer_classes.json").read_text())) == 2


def test_an_unreadable_cache_is_found_again(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path))
    (tmp_path / "tokenizer_classes.json").write_text("{not json")
    assert tokenizer_class_path(tiny_checkpoint) == auto_class_path(tiny_checkpoint)
    assert list(json.loads((tmp_path / "tokenizer_classes.json").read_text()).values()) == [
        auto_class_path(tiny_checkpoint)]


def test_the_cache_keeps_the_newest_entries(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokenizer, "CACHE_ENTRIES", 3)
    old = {f"old{i}": "json:dumps" for i in range(5)}
    (tmp_path / "tokenizer_classes.json").write_text(json.dumps(old))
    found = tokenizer_class_path(tiny_checkpoint)
    assert list(json.loads((tmp_path / "tokenizer_classes.json").read_text()).values()) == [
        "json:dumps", "json:dumps", found]
