"""Seeds: fixed functions of the run's seed; training and held-out env seeds never meet."""

from memrl.seeds import derive_seed, heldout_env_seeds, spawn_seeds, training_env_seeds


def test_training_seeds_are_even_heldout_seeds_odd_and_both_repeat():
    train = training_env_seeds(7, 3, 0, 500)
    held = heldout_env_seeds(7, 500)
    assert all(s % 2 == 0 for s in train) and all(s % 2 == 1 for s in held)
    assert len(set(held)) == 500
    assert training_env_seeds(7, 3, 0, 500) == train and heldout_env_seeds(7, 500) == held
    assert training_env_seeds(7, 3, 1, 500) != train and training_env_seeds(7, 4, 0, 500) != train


def test_derived_seeds_are_32_bit_and_depend_on_every_part():
    seeds = {derive_seed(1, i, r) for i in range(20) for r in range(3)}
    assert len(seeds) == 60 and all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(1, 2) == derive_seed(1, 2) == derive_seed(1 + 2**32, 2)
    assert spawn_seeds(4, 3) == spawn_seeds(4, 3) and len(set(spawn_seeds(4, 3))) == 3
