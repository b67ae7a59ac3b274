"""A learner and an engine sharing one GPU (half a GPU each, weights over gloo): DAPO iterations on the Echo env with
every episode counted, the engine holding the learner's weights after each broadcast and sampling what the learner
scores; and the same pair sampling one batch ahead of the learner.

Skipped without CUDA; the vLLM case also without vLLM's CUDA build. On a GPU machine: `make gpu-test`.
"""

import math

import pytest
import ray
import torch

from memrl.algorithms import DAPOConfig

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16_LOGPROB_TOL = 0.1
"""Largest per-token gap between the engine's and the learner's bf16 logprobs of the same tokens (as in
test_learner.py)."""


def _config(checkpoint, engine: str) -> DAPOConfig:
    engine_config = {"dtype": "bfloat16", **({"kv_cache_bytes": 512 * 1024**2} if engine == "vllm" else {})}
    return (DAPOConfig()
            .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity"})
            .env_runners(num_env_runners=2, num_envs_per_env_runner=4, engine=engine, engine_config=engine_config,
                         num_gpus_per_engine=0.5, max_tokens=6)
            .learners(model_path=str(checkpoint), num_learners=1, num_gpus_per_learner=0.5, dtype="bfloat16",
                      token_budget=256)
            # The learner rescores every token, so each iteration reports how far the engine is from it.
            .training(lr=1e-3, tasks_per_iteration=3, group_size=4, dynamic_sampling=False,
                      use_rollout_logprobs=False)
            .evaluation(evaluation_num_tasks=4, evaluation_num_envs_per_env_runner=2)
            .debugging(seed=3))


def _on_actor(actor, fn):
    return ray.get(actor.__ray_call__.remote(fn), timeout=120)


@pytest.mark.parametrize("engine", ["torch", "vllm"])
def test_learner_and_engine_share_one_gpu(ray_session, tiny_checkpoint, engine, request):
    if engine == "vllm":
        request.getfixturevalue("cuda_vllm")
    config = _config(tiny_checkpoint, engine)
    assert config.weight_sync_backend() == "gloo"
    algo = config.build()
    try:
        gpus = [_on_actor(a, lambda self: ray.get_runtime_context().get_accelerator_ids()["GPU"])
                for a in algo.learner_group.learners + algo.engines]
        assert len({tuple(g) for g in gpus}) == 1 and len(gpus[0]) == 1, gpus
        for iteration in (1, 2):
            result = algo.train()
            counters = result["counters"]
            assert counters["trajectories_sampled"] == counters["trajectories_trained"] == 12 * iteration
            assert result["weight_sync"]["version"] == iteration
            assert math.isfinite(result["learners"]["loss"])
            # Each iteration samples under the weights of the step before it: the learner reproduces the engine.
            assert result["off_policy"]["is_weight_max"] < math.exp(BF16_LOGPROB_TOL)
            assert result["off_policy"]["is_weight_mean"] == pytest.approx(1.0, abs=0.02)
        if engine == "torch":
            state = algo.learner_group.gather_state_dict()
            sums = _on_actor(algo.engines[0], lambda self: {
                name: p.double().sum().item() for name, p in self.engine.model.named_parameters()})
            where = _on_actor(algo.engines[0], lambda self: (self.engine.weight_version, self.engine.device.type))
            assert where == (2, "cuda")
            for name, total in sums.items():
                assert total == pytest.approx(state[name].double().sum().item(), rel=1e-9, abs=1e-9), name
    finally:
        algo.stop()


def test_one_batch_ahead_on_one_gpu_counts_every_trajectory(ray_session, tiny_checkpoint):
    # Sampling the next batch runs on the GPU while the learner trains on the same GPU.
    algo = _config(tiny_checkpoint, "torch").training(max_staleness=1, off_policy_correction="tis",
                                                      importance_cap=2.0).build()
    try:
        for iteration in (1, 2, 3):
            result = algo.train()
            counters = result["counters"]
            assert counters["trajectories_sampled"] == 12 * (iteration + 1)
            assert counters["trajectories_trained"] == 12 * iteration
            assert counters["trajectories_prefetched"] == 12
            assert counters["trajectories_stale"] == counters["trajectories_failed"] == 0
            assert result["weight_sync"]["version"] == iteration
            assert result["weight_sync"]["version_lag"] == (0 if iteration == 1 else 1)
            assert math.isfinite(result["learners"]["loss"])
        # Later batches come from the weights one step behind: every conversation (2 per trajectory) says so.
        assert result["off_policy"]["staleness_1"] == 24
    finally:
        algo.stop()
