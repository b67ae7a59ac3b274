"""Tests for the SFT warm-start: expert rows, the expert protocol's errors, the command line and a short real run."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

import envs  # noqa: F401  (registers memrl/Echo-v0)
from envs.text_space import text_space
from memrl.engines.torch_engine import TorchEngine
from memrl.sft import (
    SUMMARY_FILE,
    SFTConfig,
    call_exact_match,
    collect_expert_rows,
    episode_options,
    parse_args,
    train_sft,
)
from memrl.workflows import WORKFLOWS
from memrl.workflows.base import LastObservationWorkflow, Workflow


class NoExpertEnv(gym.Env):
    """A one-step text env that offers no expert_action()."""

    observation_space = text_space(16)
    action_space = text_space(16)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "hello", {}

    def step(self, action):
        return "", 0.0, True, False, {}


class NoExpertWorkflow(Workflow):
    """A workflow without expert_response()."""

    def reset(self, observation, info):
        self.observation = observation

    def prompt_ids(self):
        return self.chat_ids([{"role": "user", "content": self.observation}])

    def on_response(self, response_ids):
        return self.decode(response_ids), {}

    def observe(self, observation, info):
        self.observation = observation


class ShoutingWorkflow(LastObservationWorkflow):
    """An expert_response its own on_response does not parse back to the action."""

    def expert_response(self, action):
        return action.upper()


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def echo_words(seed: int, num_turns: int) -> list[str]:
    """The words an Echo episode asks for, read from its observations."""
    env = gym.make("memrl/Echo-v0", num_turns=num_turns)
    obs, _ = env.reset(seed=seed)
    words = []
    for _ in range(num_turns):
        words.append(obs.removeprefix("Say: "))
        obs, *_ = env.step(words[-1])
    return words


def test_expert_rows_are_the_workflow_prompts_and_the_expert_replies(tokenizer):
    rows = collect_expert_rows("memrl/Echo-v0", {"num_turns": 3}, "last_observation", {}, tokenizer,
                               num_tasks=4, seed=10)
    expected = [w for seed in range(10, 14) for w in echo_words(seed, 3)]
    assert len(rows) == 12
    for row, word in zip(rows, expected):
        prompt = f"<|im_start|>user\nSay: {word}<|im_end|>\n<|im_start|>assistant\n"
        assert tokenizer.decode(row["prompt_ids"]) == prompt
        # token in, token out: the prompt is the workflow's own ids, not a re-tokenization of the text
        workflow = LastObservationWorkflow(tokenizer)
        workflow.reset(f"Say: {word}", {})
        assert row["prompt_ids"].tolist() == workflow.prompt_ids()
        assert tokenizer.decode(row["response_ids"]) == f"{word}<|im_end|>"
        assert row["response_ids"][-1] == tokenizer.eos_token_id
        np.testing.assert_array_equal(row["loss_mask"], np.ones(len(row["response_ids"])))


def test_task_options_mix_task_sizes_by_seed(tokenizer):
    options = [{"num_objectives": 1, "max_turns": 4}, {"num_objectives": 3, "max_turns": 8}]
    rows = collect_expert_rows("memrl/Search-v0", {"num_objectives": 3, "max_turns": 8}, "react", {}, tokenizer,
                               num_tasks=4, seed=6, task_options=options)
    answers = [tokenizer.decode(r["response_ids"]) for r in rows if "<answer>" in tokenizer.decode(r["response_ids"])]
    # seeds 6 and 8 get one question, 7 and 9 three: the expert answers with 1, 3, 1, 3 answers
    assert [a.count(";") + 1 for a in answers] == [1, 3, 1, 3]
    assert episode_options(options, 7) == options[1] and episode_options([], 7) is None


def test_env_without_expert_action_is_refused(tokenizer):
    if "memrl_test/NoExpert-v0" not in gym.registry:
        gym.register("memrl_test/NoExpert-v0", entry_point=NoExpertEnv)
    with pytest.raises(ValueError, match=r"'memrl_test/NoExpert-v0' \(NoExpertEnv\) has no expert_action"):
        collect_expert_rows("memrl_test/NoExpert-v0", {}, "last_observation", {}, tokenizer, 1, 0)


def test_workflow_without_or_with_a_wrong_expert_response_is_refused(tokenizer, monkeypatch):
    monkeypatch.setitem(WORKFLOWS, "no_expert", NoExpertWorkflow)
    monkeypatch.setitem(WORKFLOWS, "shouting", ShoutingWorkflow)
    with pytest.raises(ValueError, match=r"workflow NoExpertWorkflow has no expert_response"):
        collect_expert_rows("memrl/Echo-v0", {}, "no_expert", {}, tokenizer, 1, 0)
    with pytest.raises(ValueError, match="must parse back to the expert action"):
        collect_expert_rows("memrl/Echo-v0", {}, "shouting", {}, tokenizer, 1, 0)


def test_command_line_maps_onto_the_config(tiny_checkpoint, tmp_path):
    config = parse_args(["--env", "memrl/Echo-v0", "--workflow", "last_observation", "--model", str(tiny_checkpoint),
                         "--out", str(tmp_path), "--steps", "7", "--lr", "0.01", "--env-config", '{"num_turns": 3}',
                         "--task-options", '[{"num_turns": 2}]'])
    assert config == SFTConfig(model_path=str(tiny_checkpoint), out=str(tmp_path), steps=7, lr=0.01,
                               env_config={"num_turns": 3}, task_options=[{"num_turns": 2}])
    with pytest.raises(SystemExit):
        parse_args(["--model", str(tiny_checkpoint), "--out", str(tmp_path), "--env-config", "[3]"])
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path)])  # --model is required


@pytest.mark.parametrize(
    "kwargs, field",
    [({"batch_size": 0}, "batch_size"), ({"lr": 0.0}, "lr"), ({"seed": -1}, "seed"), ({"eval_every": 0}, "eval_every"),
     ({"env_config": "num_turns=3"}, "env_config"), ({"model_path": "/nonexistent"}, "model_path"),
     ({"task_options": {"num_turns": 2}}, "task_options")],
)
def test_config_rejects_bad_values(tiny_checkpoint, tmp_path, kwargs, field):
    with pytest.raises(ValueError, match=f"SFTConfig.{field}"):
        SFTConfig(**{"model_path": str(tiny_checkpoint), "out": str(tmp_path), **kwargs})


@pytest.mark.slow
def test_short_warm_start_learns_echo_and_writes_a_loadable_checkpoint(ray_session, tiny_checkpoint, tmp_path,
                                                                       tokenizer):
    out = tmp_path / "echo-sft"
    config = SFTConfig(model_path=str(tiny_checkpoint), out=str(out), num_train_tasks=200, num_eval_tasks=32,
                       batch_size=32, steps=80, lr=3e-3, eval_every=80, seed=1)
    summary = train_sft(config)

    initial, final = summary["initial"], summary["final"]
    assert [point["step"] for point in summary["curve"]] == [0, 80]
    assert len(summary["train_nll"]) == 80
    # A random model spreads mass over the 1024-token vocabulary (NLL about ln 1024 = 6.9); the trained one
    # has at least learned the ten replies.
    assert initial["eval_nll"] > 5.0
    assert final["eval_nll"] < initial["eval_nll"] - 3.0
    assert final["call_exact_match"] > initial["call_exact_match"]
    assert final["reward_mean"] > initial["reward_mean"]
    assert json.loads((out / SUMMARY_FILE).read_text())["final"] == final

    # The written checkpoint is the trained model: transformers loads it, and a TorchEngine on it replies
    # greedily as the learners' weights did in the run's final evaluation, better than the untrained model.
    AutoModelForCausalLM.from_pretrained(out)
    eval_rows = collect_expert_rows("memrl/Echo-v0", {}, "last_observation", {}, tokenizer, 32, seed=201)
    trained = call_exact_match(TorchEngine(out), eval_rows, tokenizer.eos_token_id)
    untrained = call_exact_match(TorchEngine(tiny_checkpoint), eval_rows, tokenizer.eos_token_id)
    assert trained == final["call_exact_match"]
    assert trained > untrained
