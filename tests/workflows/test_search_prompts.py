"""Tests of the search workflows' prompt texts: every field a workflow fills is there, and nothing else is."""

import json
import string

from memrl.workflows.search_prompts import (
    MEM1_TEMPLATE,
    MEMORY_PROBE,
    MEMPO_TEMPLATE,
    MEMSEARCHER_SYSTEM,
    MEMSEARCHER_USER,
    REACT_TEMPLATE,
    SEARCH_TOOL,
    TOOL_RESPONSE,
)


def fields(text):
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_each_text_has_exactly_the_fields_its_workflow_fills():
    for template in (MEM1_TEMPLATE, MEMPO_TEMPLATE, REACT_TEMPLATE):
        assert fields(template) == {"questions"}
    assert fields(MEMSEARCHER_SYSTEM) == {"tool", "memory_tokens"}
    assert fields(MEMSEARCHER_USER) == {"question", "memory"}
    assert fields(TOOL_RESPONSE) == {"observation"}
    assert fields(MEMORY_PROBE) == set()


def test_memsearcher_system_prompt_shows_the_tool_and_a_parseable_call():
    text = MEMSEARCHER_SYSTEM.format(tool=json.dumps(SEARCH_TOOL), memory_tokens=64)
    assert json.dumps(SEARCH_TOOL) in text and "at most 64 tokens" in text
    example = text[text.index("<tool_call>{") + len("<tool_call>"):text.index("}</tool_call>") + 1]
    assert json.loads(example)["name"] == SEARCH_TOOL["function"]["name"]
