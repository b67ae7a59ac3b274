import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from envs.tokenizer import load_tokenizer, tokenizer_class_path

TEXTS = ["Alice was born in 1987 and 2024.", "<|im_start|>user\nx=3.14159<|im_end|>", "naïve café 北京 12 345"]


def test_named_class_tokenizes_exactly_as_autotokenizer(tiny_checkpoint):
    auto = AutoTokenizer.from_pretrained(tiny_checkpoint)
    class_path = tokenizer_class_path(tiny_checkpoint)
    assert class_path == f"{type(auto).__module__}:{type(auto).__qualname__}"
    # A fresh process, as a runner is: nothing loaded for this path yet.
    code = ("import json, sys\nfrom envs.tokenizer import load_tokenizer\n"
            f"tok = load_tokenizer({str(tiny_checkpoint)!r}, {class_path!r})\n"
            f"print(json.dumps([type(tok).__name__, [tok.encode(t) for t in {TEXTS!r}], 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    name, ids, torch_loaded = __import__("json").loads(out.strip().splitlines()[-1])
    assert name == type(auto).__name__
    assert ids == [auto.encode(t) for t in TEXTS]
    assert not torch_loaded


def test_a_runner_process_loads_its_tokenizer_and_envs_without_torch(tiny_checkpoint):
    code = f"""
import sys
import gymnasium as gym
import envs
from envs.tokenizer import load_tokenizer, tokenizer_class_path
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
