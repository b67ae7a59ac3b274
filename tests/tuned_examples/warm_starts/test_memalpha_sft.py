"""The Mem-α warm-start recipe: the short forms of the policy, baseline and answerer builds."""


import pytest
from transformers import AutoModelForCausalLM

from memrl.algorithms.sft import SUMMARY_FILE
from memrl_tuned_examples.warm_starts import memalpha_sft


@pytest.mark.parametrize("role, answerer, workflow, memory", [
    ("base", "policy", "memalpha", "tools"),  # writes and answers
    ("policy", None, "memalpha", "tools"),  # writes only
    ("memagent", None, "memagent", "text"),  # a flat-memory baseline: rewrites one paragraph
])
def test_each_role_trains_on_its_own_expert(tiny_checkpoint, role, answerer, workflow, memory):
    config = memalpha_sft.config(steps=2, num_train_tasks=4, num_eval_tasks=2, model=str(tiny_checkpoint),
                                 role=role).to_dict()
    env_config = config["environment"]["env_config"]
    assert config["env_runners"]["workflow"] == workflow
    assert (env_config["answerer"], env_config["memory"]) == (answerer, memory)
    # The base learns from the full expert; the warm-starts RL continues from one that keeps a fact 30% of the time.
    assert env_config["expert_recall"] == (1.0 if role == "base" else memalpha_sft.WARM_START_RECALL)
    assert config["training"]["task_options"] == memalpha_sft.ROLES[role].task_options


@pytest.mark.slow
@pytest.mark.parametrize("role", ["base", "memagent"])  # tool calls and answers; one rewritten paragraph
def test_warm_start_builds_short_form(ray_session, tiny_checkpoint, tmp_path, role):
    summary = memalpha_sft.build(tmp_path, steps=2, num_train_tasks=4, num_eval_tasks=2, model=tiny_checkpoint,
                                 role=role)
    want = memalpha_sft.config(2, 4, 4, str(tiny_checkpoint), role).to_dict()
    for section in ("environment", "env_runners", "training"):  # the SFT that ran is the role's
        assert summary["config"][section] == want[section], section
    assert [m["step"] for m in summary["curve"]] == [0, 2]
    assert summary["final"]["eval_nll"] < summary["initial"]["eval_nll"]
    assert (tmp_path / SUMMARY_FILE).is_file() and AutoModelForCausalLM.from_pretrained(tmp_path) is not None


@pytest.mark.slow
def test_answerer_build_short_form_trains_on_answers_over_every_kind_of_memory(ray_session, tiny_checkpoint,
                                                                               tmp_path):
    summary = memalpha_sft.build(tmp_path, steps=2, num_train_tasks=5, num_eval_tasks=5, model=tiny_checkpoint,
                                 role="answerer")
    assert summary["config"]["training"]["task_options"] == memalpha_sft.ANSWERER_TASKS
    assert summary["final"]["eval_nll"] < summary["initial"]["eval_nll"]
    with pytest.raises(ValueError, match="role must be one of"):
        memalpha_sft.build(tmp_path, steps=2, num_train_tasks=5, num_eval_tasks=5, role="judge")
