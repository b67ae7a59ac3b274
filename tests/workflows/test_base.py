import pytest
from transformers import AutoTokenizer

from memrl.workflows import WORKFLOWS, LastObservationWorkflow, workflow_class


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def test_last_observation_prompts_and_actions(tokenizer):
    wf = LastObservationWorkflow(tokenizer, system_prompt="Repeat the word.")
    wf.reset("Say: apple", {})
    text = tokenizer.decode(wf.prompt_ids())
    assert text == ("<|im_start|>system\nRepeat the word.<|im_end|>\n<|im_start|>user\nSay: apple<|im_end|>\n"
                    "<|im_start|>assistant\n")
    reply = tokenizer.encode("apple") + [tokenizer.eos_token_id]
    assert wf.on_response(reply) == ("apple", {})
    wf.observe("Say: river", {})
    assert "Say: river" in tokenizer.decode(wf.prompt_ids()) and "apple" not in tokenizer.decode(wf.prompt_ids())


def test_registry_and_errors(tokenizer):
    assert workflow_class("last_observation") is LastObservationWorkflow
    assert "last_observation" in WORKFLOWS
    with pytest.raises(ValueError, match="unknown workflow 'no_such_workflow'; registered"):
        workflow_class("no_such_workflow")
    with pytest.raises(TypeError):
        LastObservationWorkflow(tokenizer, unknown=1)
