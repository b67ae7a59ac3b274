import json

import pytest
from transformers import AutoTokenizer

from envs.webshop import WebShopEnv
from memrl.sft import SUMMARY_FILE
from memrl.workflows import workflow_class
from tuned_examples import webshop_sft
from tuned_examples.webshop_agents import MAX_TOKENS, REACT_WINDOW, WORKFLOWS, env_config, warm_start, workflow_config


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_cpu_task_experts_earn_full_reward_within_the_token_limits(tiny_checkpoint, workflow):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    env = WebShopEnv(**env_config("test"))
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        wf = workflow_class(workflow)(tokenizer, **workflow_config(workflow))
        wf.reset(obs, info)
        done = False
        while not done:
            limit = {"webshop_mem1": 700, "webshop_react": 4096, "webshop_react_truncated": REACT_WINDOW + 1}
            assert len(wf.prompt_ids()) < limit[workflow]
            reply = tokenizer.encode(wf.expert_response(env.expert_action()), add_special_tokens=False)
            assert len(reply) < MAX_TOKENS  # the stop token still fits
            action, _ = wf.on_response(reply + [tokenizer.eos_token_id])
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            if not done:
                wf.observe(obs, info)
        assert reward == 1.0


def test_cpu_task_names_bad_workflows_and_shares_reacts_warm_start():
    with pytest.raises(ValueError, match="workflow='mem1' is not allowed"):
        workflow_config("mem1")
    assert warm_start("webshop_react_truncated") == warm_start("webshop_react")
    assert env_config("test", 0.5)["malformed_reward"] == -1.0


@pytest.mark.slow
def test_warm_start_build_short_form(ray_session, tmp_path):
    summary = webshop_sft.build("webshop_mem1", tmp_path / "mem1", steps=2, num_train_tasks=4, num_eval_tasks=4,
                                recall=0.5)
    written = json.loads((tmp_path / "mem1" / SUMMARY_FILE).read_text())
    assert written["final"]["step"] == summary["final"]["step"] == 2
    config = written["config"]
    assert config["environment"]["env_config"]["split"] == "train"
    assert config["environment"]["env_config"]["expert_recall"] == 0.5
    assert config["evaluation"]["evaluation_env_config"] == {"split": "val"}
