"""Engines by name: unknown names are refused with the allowed ones; the classes load lazily."""

import pytest

from memrl.engines import ENGINES, engine_class, start_engine


def test_unknown_engines_are_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"engine='sglang' is not allowed; choose one of \['torch', 'vllm'\]"):
        start_engine("/nowhere", "sglang")


def test_registered_names_load_their_classes():
    from memrl.engines.base import InferenceEngine

    assert issubclass(engine_class("torch"), InferenceEngine) and set(ENGINES) == {"torch", "vllm"}
