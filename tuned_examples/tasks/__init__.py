"""The CPU tasks the tuned examples, the warm-start recipes (warm_starts/) and the analyses (analyses/) share: env
and workflow settings, the shipped checkpoints they start from, and their sizes. An example imports its task from
here, never another example."""

from pathlib import Path

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
"""Where the shipped warm-start checkpoints live (tuned_examples/checkpoints, built by the recipes in warm_starts/)."""
