"""Tests of trajectory stitching: the token tree, its 4D mask, and logprobs equal to each conversation run alone."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from memrl_envs.search import SearchEnv
from memrl.learner.batching import check_rows, pad_rows
from memrl.learner.stitching import stitch, tree_mask_and_positions
from memrl.workflows import workflow_class


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32, attn_implementation="sdpa").eval()


def expert_conversations(tokenizer, workflow, num_objectives, seed, **options):
    """(prompt_ids, response_ids) of every call of a scripted-expert episode, with the observations it got."""
    env = SearchEnv(num_objectives=num_objectives, max_turns=2 * num_objectives + 2)
    obs, info = env.reset(seed=seed)
    wf = workflow_class(workflow)(tokenizer, **options)
    wf.reset(obs, info)
    conversations, observations, done = [], [], False
    while not done:
        prompt = wf.prompt_ids()
        response = tokenizer.encode(wf.expert_response(env.expert_action()), add_special_tokens=False)
        response.append(tokenizer.eos_token_id)
        action, _ = wf.on_response(response)
        obs, _, terminated, truncated, info = env.step(action)
        conversations.append((prompt, response))
        observations.append(obs)
        done = terminated or truncated
        if not done:
            wf.observe(obs, info)
    return conversations, observations


def separate_logprobs(model, conversations):
    batch = pad_rows([{"prompt_ids": np.asarray(p), "response_ids": np.asarray(r)} for p, r in conversations])
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits
    return batch.split(batch.logprobs_and_entropy(batch.at_response(logits))[0])


def stitched_logprobs(model, stitched):
    row = {"prompt_ids": stitched.prompt_ids, "response_ids": stitched.response_ids, "parents": stitched.parents}
    check_rows([row])
    batch = pad_rows([row])
    assert batch.attention_mask.shape == (1, 1, stitched.num_tokens, stitched.num_tokens)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits
    return stitched.gather(batch.split(batch.logprobs_and_entropy(batch.at_response(logits))[0])[0])


def test_mem1_stitched_logprobs_equal_each_turn_run_alone(tokenizer, model):
    conversations, observations = expert_conversations(tokenizer, "mem1", 3, seed=1, memory_tokens=128)
    assert len(conversations) >= 4
    assert sum("<information>" in o for o in observations[:-1]) >= 3  # later turns carry information blocks
    stitched = stitch(conversations)
    # MEM1 drops history, so turns share the task prompt and nothing after it.
    assert stitched.num_tokens < sum(len(p) + len(r) for p, r in conversations)
    for got, want in zip(stitched_logprobs(model, stitched), separate_logprobs(model, conversations), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_react_stitches_into_one_sequence_with_masked_information(tokenizer, model):
    conversations, _ = expert_conversations(tokenizer, "react", 2, seed=3)
    stitched = stitch(conversations)
    last_prompt, last_response = conversations[-1]
    # Full history: the tree is (nearly) one chain as long as the last call, far shorter than all calls together.
    assert stitched.num_tokens <= len(last_prompt) + len(last_response) + 8 * len(conversations)
    assert stitched.num_tokens < 0.6 * sum(len(p) + len(r) for p, r in conversations)
    loss_mask = stitched.scatter([np.ones(len(r)) for _, r in conversations], dtype=np.int8)
    info = tokenizer.decode(stitched.response_ids[loss_mask == 0])
    assert "<information>" in info and "<search>" not in info  # tool tokens are context, never trained on
    for got, want in zip(stitched_logprobs(model, stitched), separate_logprobs(model, conversations), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_tree_shares_only_identical_prefixes_and_maps_tokens_back():
    conversations = [([1, 2, 3], [4, 5]), ([1, 2, 3, 4, 5, 6], [7]), ([1, 2, 9], [8, 8]), ([5], [6])]
    s = stitch(conversations)
    # tree tokens: 1 2 3 | 4 5 | 6 7 | 9 8 8 | 5 6
    assert s.prompt_ids.tolist() == [1, 2, 3]
    assert s.response_ids.tolist() == [4, 5, 6, 7, 9, 8, 8, 5, 6]
    assert s.parents.tolist() == [-1, 0, 1, 2, 3, 4, 5, 1, 7, 8, -1, 10]
    assert [i.tolist() for i in s.response_index] == [[0, 1], [3], [5, 6], [8]]
    mask, depth = tree_mask_and_positions(s.parents)
    assert depth.tolist() == [0, 1, 2, 3, 4, 5, 6, 2, 3, 4, 0, 1]
    assert np.flatnonzero(mask[9]).tolist() == [0, 1, 7, 8, 9]
    values = [np.array([1.0, 2.0]), np.array([3.0]), np.array([4.0, 5.0]), np.array([6.0])]
    scattered = s.scatter(values)
    assert scattered.tolist() == [1, 2, 0, 3, 0, 4, 5, 0, 6]
    assert [v.tolist() for v in s.gather(scattered)] == [v.tolist() for v in values]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="empty prompt"):
        stitch([([], [1])])
    with pytest.raises(ValueError, match="at least one"):
        stitch([])
    s = stitch([([1, 2], [3])])
    with pytest.raises(ValueError, match="conversation 0: got 2 values"):
        s.scatter([np.zeros(2)])
    with pytest.raises(ValueError, match="earlier token"):
        check_rows([{"prompt_ids": np.array([1, 2]), "response_ids": np.array([3]), "parents": np.array([-1, 1, 1])}])
    with pytest.raises(ValueError, match="needs a parent"):
        check_rows([{"prompt_ids": np.array([1]), "response_ids": np.array([3]), "parents": np.array([-1, -1])}])


def test_plain_and_tree_rows_share_a_micro_batch(tokenizer, model):
    conversations, _ = expert_conversations(tokenizer, "mem1", 2, seed=5, memory_tokens=128)
    s = stitch(conversations)
    tree = {"prompt_ids": s.prompt_ids, "response_ids": s.response_ids, "parents": s.parents}
    plain = {"prompt_ids": np.asarray(conversations[0][0]), "response_ids": np.asarray(conversations[0][1])}
    batch = pad_rows([plain, tree])
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits
    plain_lp, tree_lp = batch.split(batch.logprobs_and_entropy(batch.at_response(logits))[0])
    want = separate_logprobs(model, conversations)
    np.testing.assert_allclose(plain_lp, want[0], atol=1e-5, rtol=0)
    for got, expected in zip(s.gather(tree_lp), want):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
