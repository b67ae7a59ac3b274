"""Tests of the WebShop workflows (MEM1's summary agent, ReAct, truncated ReAct) over the real WebShop env."""

import pytest
from transformers import AutoTokenizer

from memrl_envs.webshop import WebShopEnv
from memrl.workflows import workflow_class
from memrl.workflows.webshop import (
    MEM1_WEBSHOP_TEMPLATE,
    REACT_WEBSHOP_TEMPLATE,
    WebShopMEM1Workflow,
    WebShopTruncatedReActWorkflow,
    find_answer,
)

ENV = {"num_products": 60, "goals_per_product": 2, "test_goals": 20, "val_goals": 20}
CONFIGS = {"webshop_mem1": {}, "webshop_react": {}, "webshop_react_truncated": {"max_context_tokens": 2048}}


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def reply(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def expert_episode(tokenizer, name, seed, config=None, env=None):
    """The env's scripted expert through the workflow's expert replies: (prompt texts, prompt lengths, reward)."""
    env = env or WebShopEnv(**ENV)
    workflow = workflow_class(name)(tokenizer, **(CONFIGS[name] if config is None else config))
    obs, info = env.reset(seed=seed)
    workflow.reset(obs, info)
    prompts, lengths = [], []
    while True:
        ids = workflow.prompt_ids()
        prompts.append(tokenizer.decode(ids))
        lengths.append(len(ids))
        text = workflow.expert_response(env.expert_action())
        action, _ = workflow.on_response(reply(tokenizer, text))
        assert action == env.expert_action()
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return prompts, lengths, reward
        workflow.observe(obs, info)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_expert_replies_parse_back_to_the_experts_actions_and_buy_right(tokenizer, name):
    for seed in range(5):
        _, lengths, reward = expert_episode(tokenizer, name, seed)
        assert reward == 1.0 and len(lengths) >= 3


def test_mem1_context_is_the_prompt_the_last_summary_and_the_page(tokenizer):
    env = WebShopEnv(**ENV)
    prompts, lengths, _ = expert_episode(tokenizer, "webshop_mem1", 0, env=env)
    instruction = env.goal.instruction_text
    assert MEM1_WEBSHOP_TEMPLATE.format(instruction=instruction).split("\n")[0] in prompts[0]
    assert "<state>\nWebShop [SEP] Instruction:" in prompts[0]
    # Later calls: exactly one summary and one page; the summary holds the steps since the search.
    for prompt in prompts[1:]:
        assert prompt.count("<summary>") == MEM1_WEBSHOP_TEMPLATE.count("<summary>") + 1
        assert prompt.count("<state>") == MEM1_WEBSHOP_TEMPLATE.count("<state>") + 1
    summaries = [p.rsplit("<summary>", 1)[1].split("</summary>")[0] for p in prompts[1:]]
    assert summaries[0] == "chosen: none" and summaries[-1].startswith("chosen: ") and summaries[-1] != "chosen: none"
    # ReAct's context grows with every turn; MEM1's does not.
    _, react_lengths, _ = expert_episode(tokenizer, "webshop_react", 0, env=env)
    assert react_lengths[-1] > max(lengths) and react_lengths == sorted(react_lengths)


def test_the_experts_summary_holds_the_options_chosen_on_the_open_product(tokenizer):
    workflow = WebShopMEM1Workflow(tokenizer)
    workflow.reset("page", {"goal": "i need socks"})
    workflow.actions = ["search[socks]", "click[b0abcdefgh]", "click[black]", "click[features]"]
    assert workflow.expert_summary("click[< prev]") == "chosen: black"  # from a sub-page: back to the product
    workflow.actions.append("click[< prev]")
    assert workflow.expert_summary("click[large]") == "chosen: black, large"
    assert workflow.expert_summary("click[buy now]") == "chosen: black"
    assert workflow.expert_summary("click[< prev]") == "chosen: none"  # from the product: back to the results
    workflow.actions.append("click[< prev]")
    assert workflow.expert_summary("click[b0zzzzzzzz]") == "chosen: none"
    workflow.actions = []
    assert workflow.expert_summary("search[socks]") == "chosen: none"


def test_mem1_summary_is_cut_to_memory_tokens(tokenizer):
    workflow = WebShopMEM1Workflow(tokenizer, memory_tokens=4)
    workflow.reset("page", {"goal": "i need socks"})
    action, _ = workflow.on_response(reply(tokenizer, "<think>x</think><summary>one two three four five six seven"
                                                      " eight</summary><answer>search[socks]</answer>"))
    assert action == "search[socks]" and len(tokenizer.encode(workflow.summary, add_special_tokens=False)) <= 4


def test_replies_without_one_answer_block_are_the_empty_action(tokenizer):
    assert find_answer("<think>x</think><answer> click[buy now] </answer>") == "click[buy now]"
    for text in ("click[buy now]", "<answer>a</answer><answer>b</answer>", "<answer>search[x]", ""):
        assert find_answer(text) == ""
    env = WebShopEnv(**ENV, malformed_reward=-1.0)
    for name in CONFIGS:
        workflow = workflow_class(name)(tokenizer, **CONFIGS[name])
        obs, info = env.reset(seed=0)
        workflow.reset(obs, info)
        workflow.prompt_ids()
        action, _ = workflow.on_response(reply(tokenizer, "I will buy it: click[buy now] <|im_start|>"))
        obs, reward, terminated, _, info = env.step(action)
        assert (action, reward, terminated, info["format_ok"]) == ("", -1.0, True, 0.0)


def test_truncated_react_keeps_the_latest_turns_that_fit(tokenizer):
    env = WebShopEnv(**ENV)
    _, full, _ = expert_episode(tokenizer, "webshop_react", 1, env=env)
    window = full[2] - 1  # too small for the third call's whole history
    prompts, lengths, reward = expert_episode(tokenizer, "webshop_react_truncated", 1,
                                              {"max_context_tokens": window}, env)
    assert reward == 1.0 and max(lengths) <= window and lengths[:2] == full[:2]
    assert all(p.count("Product description:") == 1 for p in prompts)
    workflow = WebShopTruncatedReActWorkflow(tokenizer, max_context_tokens=8)
    workflow.reset("page", {"goal": "i need socks"})
    with pytest.raises(ValueError, match="cannot hold the task prompt"):
        workflow.prompt_ids()


def test_options_are_checked(tokenizer):
    with pytest.raises(ValueError, match="must contain the field"):
        workflow_class("webshop_react")(tokenizer, template="no field")
    with pytest.raises(ValueError, match="memory_tokens must be a positive int or None"):
        WebShopMEM1Workflow(tokenizer, memory_tokens=0)
    with pytest.raises(ValueError, match="needs the env's info"):
        WebShopMEM1Workflow(tokenizer).reset("page", {})
    short = workflow_class("webshop_react")(tokenizer, template="Buy: {instruction}")
    short.reset("page", {"goal": "socks"})
    assert "Buy: socks" in tokenizer.decode(short.prompt_ids()) and REACT_WEBSHOP_TEMPLATE != short.template
