"""MemPO's memory reward and advantage (memrl.learner.advantages.memory_rewards, group_advantages and
memrl.learner.advantages.add_memory_advantages) against the paper's formulas, restated here.

MemPO's public code could not be read (see /work/shared/DESIGN.md), so the paper is the spec: R^M = P[ans | mem]
- P[ans | prefix] (eq. 4), P the L-th root of the product of the gold answer tokens' probabilities (eq. 5); the
R^M of every memory of one task's group are normalised by their mean and std (eqs. 6-8) into A^M; memory tokens
get A^T + A^M, the others A^T (sec. 4.3). The std is the unbiased one with a small epsilon, as GRPO's A^T in memrl.
"""

import math

import numpy as np
import pytest

from memrl.learner.advantages import group_advantages, memory_rewards


def ref_p(logprobs):
    prod = 1.0
    for lp in logprobs:
        prod *= math.exp(lp)
    return prod ** (1.0 / len(logprobs))


def ref_rm(mem_lp, prefix_lp):
    return ref_p(mem_lp) - ref_p(prefix_lp)


def ref_norm(values, groups, eps=1e-6):
    out = []
    for v, g in zip(values, groups):
        members = [x for x, h in zip(values, groups) if h == g]
        mean = sum(members) / len(members)
        if len(members) < 2:
            out.append(0.0)
            continue
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - 1))
        out.append((v - mean) / (std + eps))
    return out


RNG = np.random.default_rng(0)
PAIRS = [([-0.1], [-2.0]), ([-2.0], [-0.1]), ([0.0], [0.0]), ([-0.5, -0.5], [-1.0, 0.0]), ([-30.0], [-0.01]),
         ([-1e-9] * 5, [-1e-9] * 5), ([-3.0, -0.1, -0.2], [-0.1, -0.1, -0.1])]
PAIRS += [(list(RNG.uniform(-5, 0, n)), list(RNG.uniform(-5, 0, n))) for n in RNG.integers(1, 12, 33)]


@pytest.mark.parametrize("mem_lp,prefix_lp", PAIRS)
def test_memory_reward_is_the_geometric_mean_difference(mem_lp, prefix_lp):
    got = memory_rewards([np.array(mem_lp)], [np.array(prefix_lp)])
    assert got[0] == pytest.approx(ref_rm(mem_lp, prefix_lp), abs=1e-12)
    assert -1.0 <= got[0] <= 1.0


GROUPS = [
    ([0.1, 0.2, 0.3], [0, 0, 0]), ([0.5, 0.5, 0.5], [0, 0, 0]), ([0.1, -0.4, 0.2, 0.9], [0, 0, 1, 1]),
    ([0.3], [7]), ([0.3, 0.1, -0.2, 0.0, 0.7], ["a", "b", "a", "b", "a"]), ([-1.0, 1.0], [0, 0]),
]
GROUPS += [(list(RNG.uniform(-1, 1, n)), list(RNG.integers(0, 3, n))) for n in RNG.integers(2, 20, 34)]


@pytest.mark.parametrize("rewards,groups", GROUPS)
def test_memory_advantage_is_the_group_normalised_reward(rewards, groups):
    got = group_advantages(np.array(rewards), groups, norm_std=True)
    assert got == pytest.approx(ref_norm(rewards, groups), abs=1e-9)
