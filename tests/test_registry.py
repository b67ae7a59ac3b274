"""Registries: parts by name through a decorator or by "module:Name", a clear error otherwise, one part per name."""

import pytest

from memrl.registry import Registry


def test_a_decorated_part_is_found_by_name_and_a_path_by_module_and_attribute():
    parts = Registry("widget", "section.widget")

    @parts.register("round")
    def round_widget():
        return "round"

    parts.register("lazy", "json:dumps")  # imported when first asked for
    assert parts.get("round") is round_widget and "round" in parts and parts.names() == ["lazy", "round"]
    import json

    assert parts.get("lazy") is json.dumps and parts.get("json:loads") is json.loads
    parts.check("lazy")


def test_unknown_names_and_paths_are_named_with_what_is_allowed():
    parts = Registry("widget", "section.widget")
    parts.register("round", object())
    with pytest.raises(ValueError, match=r"section.widget='square' is not registered; choose one of \['round'\]"):
        parts.get("square")
    with pytest.raises(ValueError, match=r"section.widget='json:nope': cannot import 'nope' from module 'json'"):
        parts.get("json:nope")
    with pytest.raises(ValueError, match="cannot import 'x' from module 'no_such_module_here'"):
        parts.check("no_such_module_here:x")
    with pytest.raises(ValueError, match="name a widget by a string"):
        parts.get(3)


def test_a_name_holds_one_part():
    parts = Registry("widget", "section.widget")
    first = parts.register("round", "json:dumps")
    assert parts.register("round", first) == "json:dumps"  # the same part again is harmless
    with pytest.raises(ValueError, match="widget 'round' is already registered \\(json:dumps\\)"):
        parts.register("round", "json:loads")
    with pytest.raises(ValueError, match="without ':'"):
        parts.register("a:b", "json:dumps")
