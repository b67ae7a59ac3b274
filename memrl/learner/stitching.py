"""Stitch a trajectory's conversations into one token tree: one learner row, each token in its exact rollout context.

Each conversation k is a path of tokens (its prompt, then its response). A later conversation whose prompt starts
with tokens an earlier path already holds at the same positions (the task prompt, or a whole earlier history)
reuses those tokens instead of repeating them: its own tokens hang below the shared prefix. The result is a tree
in which every token's context is its ancestor path, so with a 4D attention mask (a token attends to its
ancestors and itself) and position = depth, each token's logits are the ones its conversation had at rollout time.
Sharing stops at the first token that differs, so nothing approximate ever enters; tokens a conversation saw but
did not generate (information blocks, chat template, memory it was handed) carry loss mask 0.

MEM1 keeps only question + last state + last information in context, so its turns share the question prefix;
a full-history ReAct trajectory shares everything and becomes the usual single sequence with masked tool tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Stitched:
    """A trajectory as one token tree, in the learner's row layout."""

    prompt_ids: np.ndarray
    """The first conversation's prompt: the root path every row starts with (int32)."""
    response_ids: np.ndarray
    """Every later tree token, in the order the conversations produced them (int32)."""
    parents: np.ndarray
    """Per token of prompt_ids + response_ids: index of the token before it in its context, -1 for a root (int32)."""
    response_index: list[np.ndarray]
    """Per conversation: where its response tokens sit in response_ids (int64), in response order."""

    @property
    def num_tokens(self) -> int:
        """Tokens in the tree (what one forward pass over the row costs)."""
        return len(self.parents)

    def scatter(self, per_conversation: Sequence[np.ndarray], dtype=np.float32) -> np.ndarray:
        """One value per response_ids token from per-conversation response arrays; 0 on tokens no response owns."""
        out = np.zeros(len(self.response_ids), dtype=dtype)
        if len(per_conversation) != len(self.response_index):
            raise ValueError(
                f"scatter got {len(per_conversation)} arrays for {len(self.response_index)} conversations"
            )
        for k, (index, values) in enumerate(zip(self.response_index, per_conversation)):
            values = np.asarray(values)
            if values.shape != index.shape:
                raise ValueError(f"conversation {k}: got {values.shape[0]} values for {len(index)} response tokens")
            out[index] = values
        return out

    def gather(self, values: np.ndarray) -> list[np.ndarray]:
        """Split a per-response_ids array back into one array per conversation response."""
        values = np.asarray(values)
        if values.shape != self.response_ids.shape:
            raise ValueError(f"gather needs {self.response_ids.shape} values, got {values.shape}")
        return [values[index] for index in self.response_index]


def stitch(conversations: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Stitched:
    """Build the token tree of (prompt_ids, response_ids) conversations given in rollout order.

    Conversation k reuses the longest prefix of its prompt that some earlier conversation's path (prompt +
    response) holds; everything after that prefix is new. Every prompt must be non-empty, so each response token
    has a parent.
    """
    if not conversations:
        raise ValueError("stitch needs at least one conversation")
    tokens: list[int] = []
    parents: list[int] = []
    paths: list[tuple[np.ndarray, list[int]]] = []  # per conversation: its path's token ids and tree indices
    response_index: list[np.ndarray] = []
    for k, (prompt, response) in enumerate(conversations):
        prompt = np.asarray(prompt, dtype=np.int64)
        response = np.asarray(response, dtype=np.int64)
        if len(prompt) < 1:
            raise ValueError(f"conversation {k} has an empty prompt; its first response token would have no context")
        shared, source = 0, []
        for path_ids, path_nodes in paths:
            n = min(len(prompt), len(path_ids))
            differ = np.flatnonzero(prompt[:n] != path_ids[:n])
            common = int(differ[0]) if len(differ) else n
            if common > shared:
                shared, source = common, path_nodes
        nodes = list(source[:shared])
        for token in np.concatenate([prompt[shared:], response]):
            parents.append(nodes[-1] if nodes else -1)
            nodes.append(len(tokens))
            tokens.append(int(token))
        first_prompt = len(conversations[0][0])
        response_index.append(np.asarray(nodes[len(prompt):], dtype=np.int64) - first_prompt)
        paths.append((np.concatenate([prompt, response]), nodes))
    ids = np.asarray(tokens, dtype=np.int32)
    first_prompt = len(conversations[0][0])
    return Stitched(
        prompt_ids=ids[:first_prompt],
        response_ids=ids[first_prompt:],
        parents=np.asarray(parents, dtype=np.int32),
        response_index=response_index,
    )


def tree_mask_and_positions(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[S, S] bool mask (row t: t's ancestors and t itself) and [S] positions (depth) of a token tree.

    Parents must come before their children (parents[t] < t), which `stitch` guarantees.
    """
    parents = np.asarray(parents)
    size = len(parents)
    mask = np.zeros((size, size), dtype=bool)
    depth = np.zeros(size, dtype=np.int64)
    for t, parent in enumerate(parents):
        if parent >= 0:
            mask[t] = mask[parent]
            depth[t] = depth[parent] + 1
        mask[t, t] = True
    return mask, depth
