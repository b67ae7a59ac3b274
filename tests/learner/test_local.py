"""The learner in the caller's own process (learners(num_learners=0)): the same figures as a learner actor, its calls
waited on with their deadlines, its errors named, and nothing of its start left in the process."""

import concurrent.futures
import os

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from memrl.algorithms import DAPOConfig
from memrl.checkpoints import CheckpointError
from memrl.learner.learner import RENDEZVOUS_VARIABLES
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig
from memrl.learner.learner_group import LearnerFailed, LearnerGroup
from memrl.learner.local import LocalCall, LocalLearner


@pytest.fixture(scope="module")
def group(tiny_checkpoint):
    """A learner group of num_learners=0, started with none of the rendezvous variables set."""
    saved = {key: os.environ.pop(key, None) for key in RENDEZVOUS_VARIABLES}
    rng = torch.get_rng_state()
    config = LearnerConfig(LearnersConfig(model_path=str(tiny_checkpoint), num_learners=0, token_budget=64),
                           OptimizerConfig(lr=1e-3), seed=7, compute_ref=False)
    g = LearnerGroup(config)
    g.started = {"environment": {key: os.environ.get(key) for key in RENDEZVOUS_VARIABLES},
                 "rng_unchanged": torch.equal(rng, torch.get_rng_state())}
    yield g
    g.shutdown()
    os.environ.update({key: value for key, value in saved.items() if value is not None})


@pytest.mark.slow
def test_the_learner_starts_here_and_leaves_no_variables_nor_seed_behind(group):
    assert group.local and isinstance(group.learners[0], LocalLearner) and group.num_learners == 1
    assert group.started == {"environment": dict.fromkeys(RENDEZVOUS_VARIABLES), "rng_unchanged": True}
    assert group.wait(group.learners[0].node_ip.remote(), "node_ip")  # a call as on an actor, waited on as on one


@pytest.mark.slow
def test_its_logprobs_are_the_models(group, tiny_checkpoint):
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()
    prompt, response = np.array([1, 87, 85, 261]), np.array([342, 85, 75])
    (logprobs,), _ = group.compute_logprobs([{"prompt_ids": prompt, "response_ids": response}])
    with torch.no_grad():
        logits = model(torch.tensor(np.concatenate([prompt, response]))[None]).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]
    np.testing.assert_allclose(logprobs, expected.numpy(), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_second_learner_here_joins_the_same_world_of_one(group):
    # As a PPO critic's group does beside the policy's, or a recovered learner's after the first.
    rows = [{"prompt_ids": np.array([1, 87, 85]), "response_ids": np.array([342, 85])}]
    second = LearnerGroup(group.config)
    try:
        (here,), _ = second.compute_logprobs(rows)
        (first,), _ = group.compute_logprobs(rows)
        np.testing.assert_array_equal(here, first)
    finally:
        second.shutdown()
    assert group.compute_logprobs(rows)[0][0].tolist() == first.tolist()  # the first one goes on


def test_a_call_past_its_deadline_is_a_learner_failure_naming_the_setting():
    stalled = LocalCall(concurrent.futures.Future(), "train_step")
    with pytest.raises(LearnerFailed, match=r"did not finish train_step within 0.2 s .*raise "
                                            r"fault_tolerance.learner_timeout_s"):
        LearnerGroup._wait_here([stalled], "train_step", 0.2, "fault_tolerance.learner_timeout_s")
    done = concurrent.futures.Future()
    done.set_result(3)
    assert LearnerGroup._wait_here(LocalCall(done, "node_ip"), "node_ip", 0.2, "x") == 3


@pytest.mark.slow
def test_its_errors_come_through_as_raised_and_a_failed_save_is_named(group, tmp_path):
    with pytest.raises(FileNotFoundError, match="no DeepSpeed checkpoint found"):
        group.load_checkpoint(str(tmp_path))
    learner = group.learners[0]._learner
    real = learner.engine.save_checkpoint

    def full_disk(path):
        raise OSError(28, "No space left on device")

    learner.engine.save_checkpoint = full_disk
    try:
        with pytest.raises(CheckpointError, match=r"learner 0 could not write its part of the checkpoint at .*ckpt "
                                                  r"\(OSError: .*No space left"):
            group.save_checkpoint(str(tmp_path / "ckpt"))
    finally:
        learner.engine.save_checkpoint = real


@pytest.mark.slow
def test_a_run_with_the_learner_here_trains_as_one_with_a_learner_actor(ray_session, tiny_checkpoint):
    figures = {}
    for num_learners in (0, 1):
        algo = (DAPOConfig()
                .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity"})
                .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4, engine="torch", max_tokens=6)
                .learners(model_path=str(tiny_checkpoint), num_learners=num_learners, token_budget=256)
                .training(lr=1e-3, tasks_per_iteration=3, group_size=4, dynamic_sampling=False)
                .debugging(seed=3)).build()
        assert algo.learner_group.local == (num_learners == 0)
        results = [algo.train() for _ in range(2)]
        figures[num_learners] = [(r["learners"]["loss"], r["learners"]["grad_norm"], r["env_runners"]["reward_mean"],
                                  r["weight_sync"]["bytes"]) for r in results]
        algo.stop()
    assert figures[0] == figures[1]
