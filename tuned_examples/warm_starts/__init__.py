"""Warm-start recipes: the SFT builds that made the shipped checkpoints in tuned_examples/checkpoints, which the
examples' RL starts from (`python tuned_examples/warm_starts/NAME.py` rebuilds one)."""
