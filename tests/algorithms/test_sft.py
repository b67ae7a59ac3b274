"""SFT on the Algorithm API: expert rows, the expert protocol's errors, config checks, a short real run that
learns, checkpoint resume and a Tune trial."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

import memrl_envs  # noqa: F401  (registers memrl/Echo-v0)
from memrl_envs.text_space import text_space
from memrl.algorithms.sft import (
    SFT,
    SFTConfig,
    call_exact_match,
    call_rows,
    collect_expert_rows,
    episode_options,
    expert_episodes,
    probe_rows,
)
from memrl.engines.torch_engine import TorchEngine
from memrl.algorithms.sft import SUMMARY_FILE, run
from memrl.workflows import WORKFLOWS
from memrl.workflows.base import LastObservationWorkflow, Workflow
from memrl.workflows.search_prompts import MEMORY_PROBE


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


def test_probe_rows_are_each_episodes_last_memory_probe(tokenizer):
    episodes = expert_episodes("memrl/Search-v0", {"num_objectives": 2, "max_turns": 6}, "mempo", {}, tokenizer,
                               num_tasks=3, seed=4)
    rows = probe_rows(episodes)
    assert len(rows) == 3 and len(call_rows(episodes)) == sum(len(e.conversations) for e in episodes)
    for row, episode in zip(rows, episodes):
        last = tokenizer.decode(episode.conversations[-1].response_ids)
        memory = last.split("<mem>\n")[1].split("\n</mem>")[0]
        answers = last.split("<answer>\n")[1].split("\n</answer>")[0]
        prompt = tokenizer.decode(row["prompt_ids"])
        # the questions, the memory the expert answered from, the probe's request, then the answer's opening line
        assert f"<mem>\n{memory}\n</mem>" in prompt
        assert prompt.endswith(f"{MEMORY_PROBE}<|im_end|>\n<|im_start|>assistant\n<answer>\n")
        assert tokenizer.decode(row["response_ids"]) == answers
        np.testing.assert_array_equal(row["loss_mask"], np.ones(len(row["response_ids"])))
    # only workflows that attach memory probes give probe rows
    assert probe_rows(expert_episodes("memrl/Search-v0", {}, "react", {}, tokenizer, num_tasks=2, seed=4)) == []


def test_env_without_expert_action_is_refused(tokenizer):
    if "memrl_test/NoExpert-v0" not in gym.registry:
        gym.register("memrl_test/NoExpert-v0", entry_point=NoExpertEnv)
    with pytest.raises(ValueError, match=r"'memrl_test/NoExpert-v0' \(NoExpertEnv\) has no expert_action"):
        collect_expert_rows("memrl_test/NoExpert-v0", {}, "last_observation", {}, tokenizer, 1, 0)


def test_workflow_without_or_with_a_wrong_expert_response_is_refused(tokenizer):
    for name, cls in (("no_expert", NoExpertWorkflow), ("shouting", ShoutingWorkflow)):
        if name not in WORKFLOWS:
            WORKFLOWS.register(name, cls)
    with pytest.raises(ValueError, match=r"workflow NoExpertWorkflow has no expert_response"):
        collect_expert_rows("memrl/Echo-v0", {}, "no_expert", {}, tokenizer, 1, 0)
    with pytest.raises(ValueError, match="must parse back to the expert action"):
        collect_expert_rows("memrl/Echo-v0", {}, "shouting", {}, tokenizer, 1, 0)


def _config(checkpoint, **training) -> SFTConfig:
    """SFT on Echo with the learner in this process (the RL tests restore and recover ZeRO-3 partitions over two
    ranks; SFT's learners are the same group)."""
    return (SFTConfig().learners(model_path=str(checkpoint), num_learners=0, token_budget=1024)
            .training(**{"num_train_tasks": 200, "batch_size": 32, "lr": 3e-3, **training})
            .evaluation(evaluation_num_tasks=32).debugging(seed=1))


@pytest.mark.parametrize("change, message", [
    (lambda c: c.training(batch_size=0), "training.batch_size=0 is not allowed"),
    (lambda c: c.training(steps_per_iteration=0), "training.steps_per_iteration=0 is not allowed"),
    (lambda c: c.training(lr=0.0), "training.lr=0.0 is not allowed"),
    (lambda c: c.training(task_options={"num_turns": 2}), "training.task_options=.* must be a list of dicts"),
    (lambda c: c.training(kind="policy"), "training.kind='policy' is not allowed for SFT"),
    (lambda c: c.debugging(seed=-1), "debugging.seed=-1 is not allowed"),
    (lambda c: c.training(probe_rows="yes"), "training.probe_rows='yes' is not allowed"),
    (lambda c: c.env_runners(workflow="nope"), "env_runners.workflow='nope' is not registered"),
])
def test_config_names_bad_values(tiny_checkpoint, change, message):
    config = _config(tiny_checkpoint)
    config.validate()
    with pytest.raises(ValueError, match=message):
        change(config).validate()


@pytest.mark.slow
def test_short_warm_start_learns_echo_and_writes_a_loadable_checkpoint(ray_session, tiny_checkpoint, tmp_path,
                                                                       tokenizer):
    out = tmp_path / "echo-sft"
    summary = run(_config(tiny_checkpoint, steps=80, steps_per_iteration=80), out)

    initial, final = summary["initial"], summary["final"]
    assert [point["step"] for point in summary["curve"]] == [0, 80]
    assert len(summary["train_nll"]) == 80
    # A random model spreads mass over the 1024-token vocabulary (NLL about ln 1024 = 6.9); the trained one
    # has at least learned the ten replies.
    assert initial["eval_nll"] > 5.0
    assert final["eval_nll"] < initial["eval_nll"] - 3.0
    assert final["call_exact_match"] > initial["call_exact_match"]
    assert final["reward_mean"] > initial["reward_mean"]
    written = json.loads((out / SUMMARY_FILE).read_text())
    assert written["final"] == final and written["config"]["algo"] == "SFTConfig"

    # The written checkpoint is the trained model: transformers loads it, and a TorchEngine on it replies
    # greedily as the learners' weights did in the run's final evaluation, better than the untrained model.
    AutoModelForCausalLM.from_pretrained(out)
    eval_rows = collect_expert_rows("memrl/Echo-v0", {}, "last_observation", {}, tokenizer, 32, seed=201)
    trained = call_exact_match(TorchEngine(out), eval_rows, tokenizer.eos_token_id)
    untrained = call_exact_match(TorchEngine(tiny_checkpoint), eval_rows, tokenizer.eos_token_id)
    assert trained == final["call_exact_match"]
    assert trained > untrained


@pytest.mark.slow
def test_probe_rows_join_the_training_rows_and_are_scored_held_out(ray_session, tiny_checkpoint, tmp_path):
    search = {"num_objectives": 2, "max_turns": 6}
    config = (_config(tiny_checkpoint, steps=1, steps_per_iteration=1, num_train_tasks=20, probe_rows=True)
              .environment("memrl/Search-v0", env_config=search).env_runners(workflow="mempo")
              .evaluation(evaluation_num_tasks=4))
    summary = run(config, tmp_path / "sft")
    calls = call_rows(expert_episodes("memrl/Search-v0", search, "mempo", {}, AutoTokenizer.from_pretrained(
        tiny_checkpoint), num_tasks=20, seed=1))
    assert summary["num_probe_rows"] == 20 and summary["num_train_rows"] == len(calls) + 20
    assert summary["initial"]["probe_nll"] > summary["final"]["probe_nll"] > 0
    with pytest.raises(ValueError, match="training.probe_rows=True, but workflow 'react' attached no memory probes"):
        config.env_runners(workflow="react").build()


@pytest.mark.slow
def test_restored_run_continues_exactly_as_the_uninterrupted_one(ray_session, tiny_checkpoint, tmp_path):
    # The rate decays linearly to 0 at step 9: the restored and the recovered learners go on along it. The held-out
    # episodes take the evaluation's env overrides (three turns each where training's have one).
    config = (_config(tiny_checkpoint, steps=9, steps_per_iteration=3, lr_schedule="linear", lr_decay_steps=9)
              .learners(num_learners=1)  # an actor, which dies below
              .environment("memrl/Echo-v0", env_config={"num_turns": 1})
              .evaluation(evaluation_num_tasks=8, evaluation_env_config={"num_turns": 3}))
    algo = config.build()
    assert algo.summary()["num_train_rows"] == 200 and algo.summary()["num_eval_rows"] == 8 * 3
    straight = [algo.train()]
    path = algo.save_to_path(tmp_path / "ckpt")  # after iteration 1; the run goes on as if it had not saved
    straight += [algo.train() for _ in range(2)]
    assert [r["done"] for r in straight] == [False, False, True] and straight[2]["steps"] == 9
    # Each iteration reports the mean rate of its steps (0-2, 3-5 and 6-8), as the RL algorithms do.
    assert [r["learners"]["lr"] for r in straight] == pytest.approx([3e-3 * (1 - k / 9) for k in (1, 4, 7)])
    with pytest.raises(RuntimeError, match="took all its training.steps=9"):
        algo.train()
    nll = algo.summary()["train_nll"]
    algo.stop()

    # Restored from iteration 1, with periodic checkpoints: iteration 2 is the uninterrupted run's.
    algo = config.fault_tolerance(checkpoint_frequency=1, checkpoint_dir=str(tmp_path / "periodic")).build()
    algo.restore_from_path(path)
    resumed = algo.train()
    assert resumed["training_iteration"] == 2 and resumed["steps"] == 6
    assert resumed["evaluation"] == straight[1]["evaluation"] and resumed["learners"] == straight[1]["learners"]
    # The learner dies after iteration 2: iteration 3 starts a new one from the periodic checkpoint of 2.
    ray_session.kill(algo.learner_group.learners[0], no_restart=True)
    recovered = algo.train()
    assert recovered["counters"]["learner_restarts"] == 1 and recovered["steps"] == 9
    assert algo.summary()["train_nll"] == nll  # the same draws, the same weights, the same losses
    assert recovered["evaluation"] == straight[2]["evaluation"] and recovered["learners"] == straight[2]["learners"]
    algo.stop()


@pytest.mark.slow
def test_sft_runs_as_a_tune_trial(ray_session, tiny_checkpoint, tmp_path):
    from ray import tune

    config = _config(tiny_checkpoint, steps=4, steps_per_iteration=2)
    grid = tune.Tuner(SFT, param_space=config,
                      run_config=tune.RunConfig(storage_path=str(tmp_path), name="sft", verbose=0)).fit()
    result = grid[0]
    assert result.error is None
    assert result.metrics["steps"] == 4 and result.metrics["done"] and result.metrics["training_iteration"] == 2
    assert 0 <= result.metrics["evaluation"]["call_exact_match"] <= 1
