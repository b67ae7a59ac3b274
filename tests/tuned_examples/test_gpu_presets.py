"""Every tuned example's GPU preset asks for exactly the GPUs it is given, from 1 to 64, and trains with gradient
checkpointing."""

import pytest

from memrl_tuned_examples import (
    mem1_ppo,
    mem1_webshop_ppo,
    memagent_dapo,
    memalpha_grpo,
    mempo_grpo,
    memsearcher_grpo,
)

MODEL = "/ckpt/Qwen2.5-7B-Instruct"

PRESETS = {
    "memagent_dapo": lambda n: memagent_dapo.paper_config(MODEL, n),
    "mem1_ppo": lambda n: mem1_ppo.paper_config(MODEL, n, None, None),
    "memsearcher_grpo": lambda n: memsearcher_grpo.paper_config(MODEL, n, None, None),
    "mempo_grpo": lambda n: mempo_grpo.paper_config(MODEL, n, None, None),
    "mem1_webshop_ppo": lambda n: mem1_webshop_ppo.paper_config(MODEL, n, None),
    # The answerer behind a URL: every GPU is the policy's (a local answerer's GPUs are its own, on top).
    "memalpha_grpo": lambda n: memalpha_grpo.paper_config(MODEL, n, "http://127.0.0.1:8001/v1"),
}


@pytest.mark.parametrize("num_gpus", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("example", sorted(PRESETS))
def test_every_preset_asks_for_the_gpus_it_is_given(example, num_gpus):
    cfg = PRESETS[example](num_gpus)
    cfg.validate()
    assert cfg.resources()[0]["GPU"] == pytest.approx(num_gpus), example
    assert cfg.learners_cfg.gradient_checkpointing and cfg.learners_cfg.dtype == "bfloat16"
