"""Token-budget micro-batching of conversation rows for the learner's forward passes: right-padded into rows of
equal length (`pad_rows`), or packed one after another into a single row without padding (`pack_rows`, the learners'
padding_free setting), where each row's positions start again at 0 and attention stays within the row."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from memrl.learner.stitching import tree_mask_and_positions

Row = Mapping[str, np.ndarray]
"""One conversation for training: "prompt_ids" and "response_ids" (int arrays) plus optional per-response-token
arrays such as "loss_mask", "old_logprobs", "advantages", "ref_logprobs". A stitched trajectory
(memrl.learner.stitching) also carries "parents", one per prompt + response token: each token then sees only its
ancestors, at position = depth, instead of every token before it."""


def make_micro_batches(lengths: Sequence[int], token_budget: int, packed: bool = False) -> list[list[int]]:
    """Pack row indices into micro-batches whose size stays within `token_budget`: padded (rows x longest row) or,
    with `packed`, the rows' own tokens (their sum; `pack_rows`).

    Rows are taken longest first (ties by index): padded, each goes into the current micro-batch while the padded
    size allows, which keeps padding low; packed, into the first micro-batch with room for it (first fit
    decreasing). A row longer than the budget gets a micro-batch of its own. The same input always gives the same
    output.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    for i, n in enumerate(lengths):
        if n < 1:
            raise ValueError(f"row {i} has length {n}; every row needs at least one token")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    if packed:
        room: list[int] = []
        for i in order:
            k = next((k for k, free in enumerate(room) if lengths[i] <= free), len(batches))
            if k == len(batches):
                batches.append([])
                room.append(token_budget)
            batches[k].append(i)
            room[k] -= lengths[i]
        return [sorted(b) for b in batches]
    longest = 0
    for i in order:
        # Rows come longest first, so the batch's first row sets its padded width.
        if batches and (len(batches[-1]) + 1) * longest <= token_budget:
            batches[-1].append(i)
        else:
            batches.append([i])
            longest = lengths[i]
    return [sorted(b) for b in batches]


def check_rows(rows: Sequence[Row], per_token_keys: Sequence[str] = ()) -> None:
    """Raise a ValueError naming the first row that lacks a non-empty prompt, a response or a per-token array."""
    needed = ["prompt_ids", "response_ids", *per_token_keys]
    for i, row in enumerate(rows):
        missing = [k for k in needed if k not in row]
        if missing:
            raise ValueError(f"row {i} is missing {missing}; rows need {needed}")
        if len(row["prompt_ids"]) < 1:
            raise ValueError(f"row {i} has an empty prompt; a response token needs at least one prompt token before it")
        n = len(row["response_ids"])
        if "parents" in row:
            parents = np.asarray(row["parents"])
            size = len(row["prompt_ids"]) + n
            if parents.shape != (size,):
                raise ValueError(f"row {i}: 'parents' has shape {parents.shape}; it needs one per token ({size},)")
            if np.any(parents < -1) or np.any(parents >= np.arange(size)):
                raise ValueError(f"row {i}: 'parents' must point to an earlier token (or be -1 for a root)")
            if np.any(parents[len(row["prompt_ids"]):] < 0):
                raise ValueError(f"row {i}: every response token needs a parent (a context to be predicted from)")
        for key in per_token_keys:
            if np.shape(row[key]) != (n,):
                raise ValueError(
                    f"row {i}: {key!r} has shape {np.shape(row[key])}; it must have one value per response token ({n},)"
                )


def row_length(row: Row) -> int:
    """Prompt plus response tokens of one row."""
    return len(row["prompt_ids"]) + len(row["response_ids"])


@dataclass
class MicroBatch:
    """Model inputs for a few rows (right-padded, or packed into one row), with the indices that line logits up with
    response tokens. Whatever the inputs' layout, the response side is [B, T]: one row per conversation, padded."""

    input_ids: torch.Tensor
    """[B, S] prompt then response ids, right-padded with 0; packed: [1, S], the rows one after another."""
    attention_mask: torch.Tensor | None
    """[B, S] 1 on real tokens, 0 on padding; or, when a row is a token tree, [B, 1, S, S] bool: True where the
    query token may attend to the key token (its ancestors and itself); packed: None (transformers keeps attention
    within each row from the positions that start again at 0)."""
    position_ids: torch.Tensor
    """[B, S] 0, 1, 2, ... along each row, or each token's depth in a tree (padding positions are masked anyway);
    packed: [1, S], from 0 again at each row's first token."""
    logit_index: torch.Tensor
    """[B, T] position whose logits predict each response token (its parent: prompt length + j - 1 on a plain
    row; packed: plus the row's offset in the packed row), 0 on padding."""
    response_ids: torch.Tensor
    """[B, T] response token ids, right-padded with 0."""
    response_mask: torch.Tensor
    """[B, T] 1.0 on real response tokens, 0.0 on padding."""
    response_lengths: list[int]
    """Real response length of each row, to cut [B, T] results back into per-row arrays."""
    packed: bool = False
    """The inputs are the rows packed into one ([1, S]) rather than padded ([B, S])."""

    def response_values(self, rows: Sequence[Row], key: str) -> torch.Tensor:
        """[B, T] float32 tensor of a per-response-token array from each row, zero on padding."""
        out = torch.zeros(self.response_ids.shape, dtype=torch.float32)
        for b, (row, n) in enumerate(zip(rows, self.response_lengths)):
            values = np.asarray(row[key], dtype=np.float32)
            if values.shape != (n,):
                raise ValueError(
                    f"row {b}: {key!r} has shape {values.shape}; it must have one value per response token ({n},)"
                )
            out[b, :n] = torch.tensor(values)
        return out

    def at_response(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] rows of `x` ([B, S, D] hidden states or logits; packed, [1, S, D]) at the positions that predict
        each response token, in response order."""
        if self.packed:
            return x[0, self.logit_index.to(x.device)]
        index = self.logit_index.to(x.device).unsqueeze(-1).expand(-1, -1, x.shape[-1])
        return torch.gather(x, 1, index)

    @contextlib.contextmanager
    def head_sees_responses(self, model: torch.nn.Module) -> Iterator[None]:
        """Within it, the output layer of `model` (a causal LM) is given only the hidden states that predict response
        tokens: its forward returns [B, T, V] logits in response order, and vocab-sized logits exist there alone
        (a row's prompt is most of it, and the [B, T, H] gather is a V/H-th of one on logits)."""
        head = model.get_output_embeddings()
        if head is None:
            raise ValueError(f"{type(model).__name__} has no output embeddings to compute response logits with")
        hook = head.register_forward_pre_hook(lambda _, args: (self.at_response(args[0]), *args[1:]))
        try:
            yield
        finally:
            hook.remove()

    def logprobs_and_entropy(self, logits: torch.Tensor, entropy_grad: bool = True
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T] logprob of each response token and entropy of its predicting distribution (float32), from the
        [B, T, V] logits that predict the response tokens (`at_response`, `head_sees_responses`).

        entropy_grad False computes the entropy as a figure only, outside autograd.
        """
        logp = torch.log_softmax(logits.float(), dim=-1)
        token_logp = logp.gather(-1, self.response_ids.to(logits.device).unsqueeze(-1)).squeeze(-1)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp.exp() * logp).sum(-1)
        mask = self.response_mask.to(logits.device)
        return token_logp * mask, entropy * mask

    def values(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, T] critic value before each response token, from [B, S, 1] value-head outputs (float32, 0 on padding)."""
        return self.at_response(logits)[..., 0].float() * self.response_mask.to(logits.device)

    def split(self, values: torch.Tensor) -> list[np.ndarray]:
        """Cut a [B, T] tensor into per-row float32 arrays of each row's real response length."""
        values = values.detach().float().cpu().numpy()
        return [values[b, :n].copy() for b, n in enumerate(self.response_lengths)]

    def to(self, device: torch.device | str) -> MicroBatch:
        """The same micro-batch with every tensor on `device`."""
        return MicroBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=None if self.attention_mask is None else self.attention_mask.to(device),
            position_ids=self.position_ids.to(device),
            logit_index=self.logit_index.to(device),
            response_ids=self.response_ids.to(device),
            response_mask=self.response_mask.to(device),
            response_lengths=self.response_lengths,
            packed=self.packed,
        )


def pad_rows(rows: Sequence[Row]) -> MicroBatch:
    """Right-pad rows (prompt + response) into one micro-batch."""
    if not rows:
        raise ValueError("pad_rows needs at least one row")
    prompt_lens = [len(r["prompt_ids"]) for r in rows]
    resp_lens = [len(r["response_ids"]) for r in rows]
    for b, p in enumerate(prompt_lens):
        # The first response token is predicted from the last prompt position.
        if p < 1:
            raise ValueError(f"row {b} has an empty prompt; a response token needs at least one prompt token before it")
    seq_len = max(p + t for p, t in zip(prompt_lens, resp_lens))
    resp_len = max(max(resp_lens), 1)
    batch = len(rows)
    trees = any("parents" in row for row in rows)
    input_ids = torch.zeros(batch, seq_len, dtype=torch.long)
    response_ids = torch.zeros(batch, resp_len, dtype=torch.long)
    response_mask = torch.zeros(batch, resp_len, dtype=torch.float32)
    logit_index = torch.zeros(batch, resp_len, dtype=torch.long)
    position_ids = torch.arange(seq_len).unsqueeze(0).expand(batch, -1).clone()
    if trees:
        # Padding queries attend to themselves only: a query row with nothing to attend to would give NaN.
        attention_mask = torch.eye(seq_len, dtype=torch.bool).repeat(batch, 1, 1, 1)
    else:
        attention_mask = torch.zeros(batch, seq_len, dtype=torch.long)
    for b, row in enumerate(rows):
        p, t = prompt_lens[b], resp_lens[b]
        ids = np.concatenate([np.asarray(row["prompt_ids"]), np.asarray(row["response_ids"])]).astype(np.int64)
        input_ids[b, : p + t] = torch.from_numpy(ids)
        response_ids[b, :t] = input_ids[b, p : p + t]
        response_mask[b, :t] = 1.0
        parents = np.asarray(row["parents"]) if "parents" in row else np.arange(-1, p + t - 1)
        logit_index[b, :t] = torch.from_numpy(parents[p:].astype(np.int64))
        if trees:
            mask, depth = tree_mask_and_positions(parents)
            attention_mask[b, 0, : p + t, : p + t] = torch.from_numpy(mask)
            position_ids[b, : p + t] = torch.from_numpy(depth)
        else:
            attention_mask[b, : p + t] = 1
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logit_index=logit_index,
        response_ids=response_ids,
        response_mask=response_mask,
        response_lengths=resp_lens,
    )


def pack_rows(rows: Sequence[Row]) -> MicroBatch:
    """Pack rows (prompt + response) one after another into a single row, with no padding: the forward pass computes
    only the rows' own tokens. Exact where transformers turns positions that start again at 0 into attention within
    each row: a block-causal mask under sdpa and eager (the [S, S] mask of the packed row), variable-length kernels
    under flash_attention_2 (no mask at all). Token trees (stitched trajectories) keep their own masks: pad them."""
    if not rows:
        raise ValueError("pack_rows needs at least one row")
    if any("parents" in row for row in rows):
        raise ValueError("pack_rows cannot pack token trees (rows with 'parents'); pad them with pad_rows")
    resp_lens = [len(r["response_ids"]) for r in rows]
    resp_len = max(max(resp_lens), 1)
    response_ids = torch.zeros(len(rows), resp_len, dtype=torch.long)
    response_mask = torch.zeros(len(rows), resp_len, dtype=torch.float32)
    logit_index = torch.zeros(len(rows), resp_len, dtype=torch.long)
    ids, positions, offset = [], [], 0
    for b, row in enumerate(rows):
        p, t = len(row["prompt_ids"]), resp_lens[b]
        if p < 1:
            raise ValueError(f"row {b} has an empty prompt; a response token needs at least one prompt token before it")
        ids.append(np.concatenate([np.asarray(row["prompt_ids"]), np.asarray(row["response_ids"])]).astype(np.int64))
        positions.append(np.arange(p + t))
        response_ids[b, :t] = torch.from_numpy(ids[-1][p:])
        response_mask[b, :t] = 1.0
        logit_index[b, :t] = torch.arange(offset + p - 1, offset + p + t - 1)
        offset += p + t
    return MicroBatch(
        input_ids=torch.from_numpy(np.concatenate(ids))[None],
        attention_mask=None,
        position_ids=torch.from_numpy(np.concatenate(positions))[None],
        logit_index=logit_index,
        response_ids=response_ids,
        response_mask=response_mask,
        response_lengths=resp_lens,
        packed=True,
    )
