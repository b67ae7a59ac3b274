"""The recipes' short forms train on one learner: what they test is each recipe's data, stages and outputs. Two
DeepSpeed ranks (the recipes' NUM_LEARNERS) are tested on SFT in tests/algorithms/test_sft.py and on the learner
group in tests/learner."""

import pytest

from memrl_tuned_examples.warm_starts import memagent_sft, memalpha_sft, memory_r1_sft, search_sft, webshop_sft


@pytest.fixture(autouse=True)
def one_learner(monkeypatch):
    for recipe in (memagent_sft, memalpha_sft, memory_r1_sft, search_sft, webshop_sft):
        monkeypatch.setattr(recipe, "NUM_LEARNERS", 1)
