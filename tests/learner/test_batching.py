"""Tests for token-budget micro-batching, row padding and the response-aligned logprob view."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memrl.learner.batching import make_micro_batches, pack_rows, pad_rows
from memrl.learner.learner_group import split_rows


def test_micro_batches_respect_budget_and_cover_every_row_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=200).tolist()
    budget = 100
    batches = make_micro_batches(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= budget
    # Rows are packed together, not one per micro-batch.
    assert len(batches) < len(lengths) / 2


def test_row_longer_than_budget_gets_its_own_micro_batch():
    batches = make_micro_batches([5, 50, 4, 3], token_budget=12)
    assert [1] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]
    for b in batches:
        if b != [1]:
            assert len(b) * max([5, 50, 4, 3][i] for i in b) <= 12


def test_micro_batches_are_deterministic_and_pack_longest_first():
    lengths = [3, 9, 3, 9, 2]
    assert make_micro_batches(lengths, 18) == make_micro_batches(list(lengths), 18)
    # 9, 9 fill 18; then 3, 3, 2 pad to 9 <= 18.
    assert make_micro_batches(lengths, 18) == [[1, 3], [0, 2, 4]]


def test_packed_micro_batches_hold_at_most_the_budget_in_real_tokens_first_fit_decreasing():
    lengths = [3, 9, 3, 9, 2, 7]
    # Longest first, each into the first micro-batch with room: 9+9, then 7+3+3+2 = 15 (padded, 7 x 4 = 28 > 18).
    assert make_micro_batches(lengths, 18, packed=True) == [[1, 3], [0, 2, 4, 5]]
    assert make_micro_batches([5, 50, 4, 3], 12, packed=True) == [[1], [0, 2, 3]]  # too long: a batch of its own
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=200).tolist()
    batches = make_micro_batches(lengths, 100, packed=True)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= 100 for b in batches)
    assert len(batches) < len(make_micro_batches(lengths, 100))  # no padding: fewer passes for the same rows


@pytest.mark.parametrize("lengths, budget, match", [([3], 0, "token_budget"), ([3, 0], 8, "row 1")])
@pytest.mark.parametrize("packed", [False, True])
def test_micro_batches_reject_bad_input(lengths, budget, match, packed):
    with pytest.raises(ValueError, match=match):
        make_micro_batches(lengths, budget, packed=packed)


def test_split_rows_balances_tokens_deterministically():
    lengths = [36, 12, 10, 9, 8]
    parts = split_rows(lengths, 2)
    assert parts == [[0], [1, 2, 3, 4]] == split_rows(lengths, 2)
    assert split_rows([5, 5, 5], 4) == [[0], [1], [2], []]
    with pytest.raises(ValueError, match="num_ranks"):
        split_rows([1], 0)


def _row(prompt, response, **arrays):
    return {"prompt_ids": np.array(prompt), "response_ids": np.array(response), **arrays}


def test_pad_rows_lines_logits_up_with_response_tokens():
    rows = [_row([5, 6, 7], [8, 9]), _row([4], [3, 2, 1])]
    mb = pad_rows(rows)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9], [4, 3, 2, 1, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4]] * 2
    assert mb.response_ids.tolist() == [[8, 9, 0], [3, 2, 1]]
    assert mb.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    # Token at position p is predicted by the logits at p - 1.
    assert mb.logit_index[0, :2].tolist() == [2, 3]
    assert mb.logit_index[1].tolist() == [0, 1, 2]

    # Logits that put all mass on token (position + 1) make exactly the real next tokens certain.
    vocab = 12
    logits = torch.full((2, 5, vocab), -30.0)
    for b in range(2):
        for s in range(4):
            logits[b, s, mb.input_ids[b, s + 1]] = 30.0
    logprobs, entropy = mb.logprobs_and_entropy(mb.at_response(logits))
    assert logprobs.shape == entropy.shape == (2, 3)
    assert torch.allclose(logprobs, torch.zeros(2, 3), atol=1e-6)
    assert torch.allclose(entropy, torch.zeros(2, 3), atol=1e-6)
    # Uniform logits: logprob -log V and entropy log V on real tokens, 0 on padding.
    logprobs, entropy = mb.logprobs_and_entropy(torch.zeros(2, 3, vocab))
    expected = torch.log(torch.tensor(float(vocab))) * mb.response_mask
    assert torch.allclose(-logprobs, expected) and torch.allclose(entropy, expected)
    assert [a.tolist() for a in mb.split(torch.arange(6.0).view(2, 3))] == [[0.0, 1.0], [3.0, 4.0, 5.0]]


def test_entropy_is_a_figure_outside_autograd_unless_asked_for():
    mb = pad_rows([_row([5, 6, 7], [8, 9]), _row([4], [3, 2, 1])])
    logits = torch.randn(2, 3, 12, requires_grad=True)
    logprobs, entropy = mb.logprobs_and_entropy(logits, entropy_grad=False)
    assert logprobs.requires_grad and not entropy.requires_grad
    kept_logprobs, kept_entropy = mb.logprobs_and_entropy(logits)
    assert kept_entropy.requires_grad
    assert torch.equal(entropy, kept_entropy.detach()) and torch.equal(logprobs, kept_logprobs)
    kept_entropy.sum().backward()
    assert logits.grad.abs().sum() > 0


def test_response_values_pad_and_check_lengths():
    rows = [_row([1], [2, 3], advantages=np.array([0.5, -1.0])), _row([1, 2], [4], advantages=np.array([2.0]))]
    mb = pad_rows(rows)
    assert mb.response_values(rows, "advantages").tolist() == [[0.5, -1.0], [2.0, 0.0]]
    bad = [rows[0], _row([1, 2], [4], advantages=np.array([2.0, 1.0]))]
    with pytest.raises(ValueError, match="row 1: 'advantages'"):
        pad_rows(bad).response_values(bad, "advantages")


def test_pad_rows_rejects_empty_prompt_and_empty_batch():
    with pytest.raises(ValueError, match="empty prompt"):
        pad_rows([_row([], [1, 2])])
    with pytest.raises(ValueError, match="at least one row"):
        pad_rows([])


def test_output_layer_sees_only_what_predicts_a_response_token(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    rows = [{"prompt_ids": np.array([5, 6, 7, 8]), "response_ids": np.array([9, 10])},
            {"prompt_ids": np.array([11, 12]), "response_ids": np.array([13, 14, 15])},
            {"prompt_ids": np.array([16]), "response_ids": np.array([17])}]
    mb = pad_rows(rows)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    inputs = {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask, "position_ids": mb.position_ids}
    full = model(**inputs).logits
    with mb.head_sees_responses(model):
        part = model(**inputs).logits
    assert full.shape[1] == 6 and part.shape[1] == 3  # 6 positions, 3 response tokens at most
    assert not model.get_output_embeddings()._forward_pre_hooks  # the output layer is itself again after
    for a, b in zip(mb.logprobs_and_entropy(mb.at_response(full)), mb.logprobs_and_entropy(part)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # Gradients reach the model the same way through both.
    grads = []
    for response_logits in (mb.at_response(full), part):
        model.zero_grad()
        mb.logprobs_and_entropy(response_logits)[0].sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)



def test_pack_rows_lays_rows_end_to_end_with_positions_from_zero_in_each():
    mb = pack_rows([_row([5, 6, 7], [8, 9]), _row([4], [3, 2, 1])])
    assert mb.packed and mb.attention_mask is None
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9, 4, 3, 2, 1]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    # Each response token is predicted from the position before it, counted in the packed row.
    assert mb.logit_index.tolist() == [[2, 3, 0], [5, 6, 7]]
    assert mb.response_ids.tolist() == [[8, 9, 0], [3, 2, 1]] and mb.response_lengths == [2, 3]
    assert mb.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    hidden = torch.arange(9.0)[None, :, None]
    assert mb.at_response(hidden)[..., 0].tolist() == [[2, 3, 0], [5, 6, 7]]
    with pytest.raises(ValueError, match="empty prompt"):
        pack_rows([_row([], [1])])
    with pytest.raises(ValueError, match="at least one row"):
        pack_rows([])
    with pytest.raises(ValueError, match="token trees"):
        pack_rows([_row([1, 2], [3], parents=np.array([-1, 0, 1]))])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_rows_score_and_train_as_padded_rows(tiny_checkpoint, attention):
    """Packing changes which tokens the forward pass computes, not what any row's tokens see: every response token's
    logprob and entropy, and the gradient they give, equal the padded batch's."""
    from transformers import AutoModelForCausalLM

    rng = np.random.default_rng(1)
    rows = [_row(rng.integers(3, 300, p), rng.integers(3, 300, t)) for p, t in ((7, 5), (2, 9), (12, 1), (1, 4))]
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32, attn_implementation=attention)
    figures, grads = [], []
    for mb in (pad_rows(rows), pack_rows(rows)):
        model.zero_grad()
        with mb.head_sees_responses(model):
            logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids,
                           use_cache=False).logits
        logprobs, entropy = mb.logprobs_and_entropy(logits)
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
        figures.append((mb.split(logprobs), mb.split(entropy)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    for padded, packed in zip(*figures):
        for a, b in zip(padded, packed, strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    # Without the restart of positions the rows would see each other: the check above can fail.
    mb = pack_rows(rows)
    with mb.head_sees_responses(model):
        leaked = model(input_ids=mb.input_ids, position_ids=torch.arange(mb.input_ids.shape[1])[None]).logits
    assert np.abs(mb.split(mb.logprobs_and_entropy(leaked)[0])[1] - figures[0][0][1]).max() > 1e-3
