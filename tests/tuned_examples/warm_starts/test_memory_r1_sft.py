"""The Memory-R1 warm-start recipe: each role's expert and a short build."""

import pytest
from transformers import AutoModelForCausalLM

from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples.warm_starts import memory_r1_sft


@pytest.mark.parametrize("role", sorted(memory_r1_sft.ROLES))
def test_each_role_learns_from_its_imperfect_expert_on_the_brief_prompts(role):
    config = memory_r1_sft.config(steps=2, num_train_tasks=4, num_eval_tasks=2, role=role).to_dict()
    env_config = config["environment"]["env_config"]
    assert (env_config["role"], env_config["prompt"], env_config.get("answerer")) == (role, "brief", None)
    assert env_config["expert_update_rate"] == memory_r1_sft.TEACHER_UPDATE_RATE < 1
    assert env_config["expert_recency_rate"] == memory_r1_sft.TEACHER_RECENCY_RATE < 1
    assert config["learners"]["model_path"] == str(memory_r1_sft.COPYING)
    with pytest.raises(ValueError, match="role must be one of"):
        memory_r1_sft.config(steps=2, num_train_tasks=4, num_eval_tasks=2, role="judge")


@pytest.mark.slow
def test_answer_build_short_form(ray_session, tiny_checkpoint, tmp_path):
    summary = memory_r1_sft.build(tmp_path, steps=2, num_train_tasks=4, num_eval_tasks=4, role="answer",
                                  model=str(tiny_checkpoint))
    assert summary["config"]["environment"]["env_config"]["role"] == "answer"
    assert summary["final"]["eval_nll"] < summary["initial"]["eval_nll"]
    assert (tmp_path / SUMMARY_FILE).is_file() and AutoModelForCausalLM.from_pretrained(tmp_path) is not None
