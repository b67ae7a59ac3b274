"""Tests of the PPO critic: a 2-rank ZeRO-3 learner group with a value head, on plain and stitched rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification

from memrl.learner.batching import pad_rows
from memrl.learner.learner import check_train_rows
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig
from memrl.learner.stitching import stitch


def _conversations(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Five calls of one trajectory: a shared task prompt, then per call new context and a reply."""
    rng = np.random.default_rng(seed)
    task = rng.integers(3, 1000, 7)
    return [(np.concatenate([task, rng.integers(3, 1000, 2 + k)]), rng.integers(3, 1000, 4)) for k in range(5)]


@pytest.fixture(scope="module")
def critic(ray_session, tiny_checkpoint):
    learners = LearnersConfig(model_path=str(tiny_checkpoint), num_learners=2, token_budget=32,
                              param_persistence_threshold=0)
    config = LearnerConfig(learners, OptimizerConfig(lr=3e-3), seed=0, head="value")
    group = LearnerGroup(config)
    yield group
    group.shutdown()


def test_config_refuses_a_critic_with_a_reference(tiny_checkpoint):
    with pytest.raises(ValueError, match="head"):
        LearnerConfig(LearnersConfig(model_path=str(tiny_checkpoint)), OptimizerConfig(), seed=0, head="q")
    with pytest.raises(ValueError, match="compute_ref"):
        LearnerConfig(LearnersConfig(model_path=str(tiny_checkpoint)), OptimizerConfig(), seed=0, head="value",
                      compute_ref=True)
    with pytest.raises(ValueError, match="'returns'"):
        check_train_rows([{"prompt_ids": [1], "response_ids": [2], "loss_mask": [1], "old_values": [0.0]}], "value")


@pytest.mark.slow
def test_values_match_transformers_on_plain_and_stitched_rows(critic, tiny_checkpoint):
    state = critic.gather_state_dict()
    assert "score.weight" in state
    model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint, num_labels=1, dtype=torch.float32)
    model.load_state_dict(state)
    model.eval()
    conversations = _conversations(0)
    plain = [{"prompt_ids": p, "response_ids": r} for p, r in conversations]
    batch = pad_rows(plain)
    with torch.no_grad():
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids).logits
    want = batch.split(batch.values(out))
    for got, expected in zip(critic.compute_values(plain), want, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    s = stitch(conversations)
    (tree,) = critic.compute_values([{"prompt_ids": s.prompt_ids, "response_ids": s.response_ids,
                                      "parents": s.parents}])
    for got, expected in zip(s.gather(tree), want, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_critic_steps_fit_the_returns_on_loss_tokens_only(critic):
    rows = []
    for seed in range(4):
        s = stitch(_conversations(seed))
        loss_mask = s.scatter([np.ones(len(r)) for _, r in _conversations(seed)], dtype=np.int8)
        returns = np.where(loss_mask > 0, 1.0 + seed / 2, 0.0).astype(np.float32)
        rows.append({"prompt_ids": s.prompt_ids, "response_ids": s.response_ids, "parents": s.parents,
                     "loss_mask": loss_mask, "returns": returns})
    config = LossConfig(value_clip=0.0)
    losses = []
    for _ in range(25):
        for row, values in zip(rows, critic.compute_values(rows)):
            row["old_values"] = values
        metrics = critic.train_step(rows, config)
        losses.append(metrics["vf_loss"])
    assert metrics["tokens"] == sum(int(r["loss_mask"].sum()) for r in rows)
    assert losses[-1] < 0.05 * losses[0]
    for row, values in zip(rows, critic.compute_values(rows)):
        on = row["loss_mask"] > 0
        np.testing.assert_allclose(values[on], row["returns"][on], atol=0.3)
