"""The recipes' short forms train with their learner in the test's process (num_learners=0): what they test is each
recipe's data, stages and outputs. Learner actors and two DeepSpeed ranks (the recipes' NUM_LEARNERS) are tested in
tests/algorithms and tests/learner."""

import pytest

from memrl_tuned_examples.warm_starts import memagent_sft, memalpha_sft, memory_r1_sft, search_sft, webshop_sft


@pytest.fixture(autouse=True)
def learner_here(monkeypatch):
    for recipe in (memagent_sft, memalpha_sft, memory_r1_sft, search_sft, webshop_sft):
        monkeypatch.setattr(recipe, "NUM_LEARNERS", 0)
