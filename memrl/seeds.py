"""Every seed memrl derives, in one place: a run is a fixed function of its one `debugging.seed`.

Env seeds split in two disjoint halves: training tasks reset their envs with even seeds, held-out tasks with odd
ones, so no evaluation ever scores a task the policy trained on. SFT warm-starts use consecutive seeds of their
own (expert episodes, not RL tasks).
"""

from __future__ import annotations

import numpy as np

HELDOUT_STREAM = 2**31 - 1
"""Second word of the held-out draws' seed sequence; training draws use (seed, iteration, round) instead."""


def derive_seed(*parts: int) -> int:
    """A 32-bit seed that is a fixed function of `parts` (each taken modulo 2**32)."""
    return int(np.random.SeedSequence([p % 2**32 for p in parts]).generate_state(1)[0])


def spawn_seeds(seed: int, n: int) -> list[int]:
    """`n` 32-bit seeds drawn from `seed` (one per env runner of a sampling call)."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n)]


def training_env_seeds(seed: int, iteration: int, round_: int, n: int) -> list[int]:
    """The `n` env seeds of an iteration's sampling round: even, drawn from (seed, iteration, round)."""
    rng = np.random.default_rng([seed, iteration, round_])
    return [int(s) for s in 2 * rng.integers(0, 2**30, n)]


def heldout_env_seeds(seed: int, n: int) -> list[int]:
    """`n` distinct odd env seeds drawn from `seed`: the held-out tasks, the same at every evaluation."""
    rng = np.random.default_rng([seed, HELDOUT_STREAM])
    return [int(s) for s in 2 * rng.choice(2**30, size=n, replace=False) + 1]


def heldout_sampling_seed(seed: int) -> int:
    """The sampling seed of held-out rollouts (matters only when evaluation samples at a temperature above 0)."""
    return derive_seed(seed, HELDOUT_STREAM)
