"""Tests of the search workflows' prompt texts: every field a workflow fills is there, and nothing else is."""

import json
import string

from memrl.workflows import search_prompts as p


def fields(text):
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_each_text_has_exactly_the_fields_its_workflow_fills():
    for template in (p.MEM1_TEMPLATE, p.MEMPO_TEMPLATE, p.REACT_TEMPLATE):
        assert fields(template) == {"questions"}
    assert fields(p.MEMSEARCHER_SYSTEM) == {"tool", "memory_tokens"}
    assert fields(p.MEMSEARCHER_USER) == {"question", "memory"}
    assert fields(p.TOOL_RESPONSE) == {"observation"}
    assert fields(p.MEMORY_PROBE) == set()


def test_memsearcher_system_prompt_shows_the_tool_and_a_parseable_call():
    text = p.MEMSEARCHER_SYSTEM.format(tool=json.dumps(p.SEARCH_TOOL), memory_tokens=64)
    assert json.dumps(p.SEARCH_TOOL) in text and "at most 64 tokens" in text
    example = text[text.index("<tool_call>{") + len("<tool_call>"):text.index("}</tool_call>") + 1]
    assert json.loads(example)["name"] == p.SEARCH_TOOL["function"]["name"]
