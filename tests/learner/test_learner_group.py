import numpy as np
import pytest
import torch

from memrl.learner.learner_group import step_counts
from memrl.learner.losses import aggregate


def test_rows_without_a_loss_token_are_no_sequence_of_the_mean():
    rows = [{"loss_mask": np.array([1, 1, 0], dtype=np.int8)}, {"loss_mask": np.zeros(4, dtype=np.int8)},
            {"loss_mask": np.array([0, 1], dtype=np.int8)}]
    assert step_counts(rows) == (3.0, 2.0)


@pytest.mark.parametrize("mode", ["seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_a_step_with_an_all_masked_row_has_the_loss_of_the_step_without_it(mode):
    values = torch.tensor([[1.0, 3.0, 9.0], [5.0, 5.0, 5.0], [2.0, 4.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    rows = [{"loss_mask": m.numpy()} for m in mask]
    tokens, seqs = step_counts(rows)
    with_empty = aggregate(values, mask, mode, tokens, seqs, max_tokens=3)
    keep = [0, 2]
    tokens, seqs = step_counts([rows[i] for i in keep])
    without = aggregate(values[keep], mask[keep], mode, tokens, seqs, max_tokens=3)
    assert with_empty.item() == pytest.approx(without.item())
    assert with_empty.item() == pytest.approx((2.0 + 4.0) / 2 if mode == "seq_mean_token_mean" else (4 / 3 + 4) / 2)
