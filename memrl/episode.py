"""Multi-conversation episodes and their Arrow form (one row per conversation).

A trajectory is what one task produced: an ordered list of conversations (one LLM call
each) plus trajectory-level rewards and metrics. Token ids and logprobs are kept exactly
as the engine produced them ("token in, token out"); training never re-tokenizes text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = 3
"""Bumped whenever a column is added, removed or changes meaning."""


@dataclass
class Conversation:
    """One LLM call: the prompt the model saw and the response it sampled."""

    prompt_ids: np.ndarray
    """Prompt token ids (int32), exactly as sent to the engine."""
    response_ids: np.ndarray
    """Response token ids (int32). May include env/tool tokens spliced in, masked out by `loss_mask`."""
    logprobs: np.ndarray
    """Rollout logprob of each response token under the generating weights (float32)."""
    loss_mask: np.ndarray | None = None
    """Per response token, 1 if the token is trained on, 0 for env/tool tokens (int8). None means all ones."""
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Named half-open ranges [start, end) over response tokens, e.g. {"mem": [(3, 17)]}."""
    probes: dict[str, np.ndarray] = field(default_factory=dict)
    """Named token sequences the workflow attached for the learner to score (int32), e.g. MemPO's memory probes:
    the gold answer after a context holding only this call's memory."""
    reward: float = 0.0
    """Reward attached to this call alone (e.g. a per-action reward); 0 when only trajectories are scored."""
    finish_reason: str = "stop"
    """Why generation ended: "stop" (a stop token), "length" (max tokens) or "abort"."""
    weight_version: int = 0
    """Version of the weights that generated this response."""

    def __post_init__(self) -> None:
        self.prompt_ids = np.asarray(self.prompt_ids, dtype=np.int32)
        self.response_ids = np.asarray(self.response_ids, dtype=np.int32)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32)
        if self.loss_mask is None:
            self.loss_mask = np.ones(len(self.response_ids), dtype=np.int8)
        self.loss_mask = np.asarray(self.loss_mask, dtype=np.int8)
        n = len(self.response_ids)
        if len(self.logprobs) != n or len(self.loss_mask) != n:
            raise ValueError(
                f"Conversation: response_ids ({n}), logprobs ({len(self.logprobs)}) and "
                f"loss_mask ({len(self.loss_mask)}) must have the same length"
            )
        self.probes = {name: np.asarray(ids, dtype=np.int32) for name, ids in self.probes.items()}
        for name, ranges in self.spans.items():
            for start, end in ranges:
                if not 0 <= start <= end <= n:
                    raise ValueError(
                        f"Conversation: span {name!r} range ({start}, {end}) is outside the response "
                        f"(allowed 0 <= start <= end <= {n})"
                    )

    @property
    def num_tokens(self) -> int:
        """Prompt plus response tokens: the context size of this call."""
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass
class Trajectory:
    """All conversations of one task, in order, with the task's reward."""

    conversations: list[Conversation]
    """LLM calls in the order they were made."""
    reward: float = 0.0
    """Scalar reward the algorithm trains on."""
    group_id: str = ""
    """Trajectories sampled for the same task share a group id (GRPO-style groups)."""
    traj_id: str = ""
    """Unique id of this trajectory."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Env and evaluation figures: em, f1, peak_context_tokens, num_calls, ..."""
    failure: str = ""
    """Why the env could not finish the episode through no fault of the policy (e.g. its retrieval server failed on
    every retry); "" for an episode that ran its course. Failed episodes are counted, never trained on or scored."""

    @property
    def weight_version(self) -> int:
        """Oldest weight version among the conversations (what lag is measured against)."""
        return min((c.weight_version for c in self.conversations), default=0)


_SPAN = pa.struct([("name", pa.string()), ("start", pa.int32()), ("end", pa.int32())])
_PROBE = pa.struct([("name", pa.string()), ("ids", pa.list_(pa.int32()))])

SCHEMA = pa.schema(
    [
        ("traj_id", pa.string()),
        ("group_id", pa.string()),
        ("conv_index", pa.int32()),
        ("num_convs", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("spans", pa.list_(_SPAN)),
        ("probes", pa.list_(_PROBE)),
        ("conv_reward", pa.float64()),
        ("finish_reason", pa.string()),
        ("weight_version", pa.int64()),
        ("traj_reward", pa.float64()),
        ("traj_metrics", pa.map_(pa.string(), pa.float64())),
        ("failure", pa.string()),
    ],
    metadata={b"memrl.schema_version": str(SCHEMA_VERSION).encode()},
)
"""Arrow schema of an episode batch: one row per conversation, trajectory fields repeated."""


def tokenizer_metadata(tokenizer) -> dict[str, str]:
    """Schema metadata naming the tokenizer that made a batch's ids, so the batch decodes without memrl: where it was
    loaded from (`memrl.tokenizer`, for AutoTokenizer.from_pretrained), its vocabulary size and a sha256 of its
    vocabulary (token -> id, sorted) to check a copy loaded elsewhere is the same."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode()
    return {"memrl.tokenizer": str(tokenizer.name_or_path), "memrl.tokenizer_vocab_size": str(len(tokenizer)),
            "memrl.tokenizer_vocab_sha256": hashlib.sha256(vocab).hexdigest()}


def numeric_metrics(metrics: dict, owner: str) -> dict[str, float]:
    """`metrics` as floats; a key that is not a string or a value that is not a real number raises a TypeError that
    starts with `owner` (who holds the metrics, e.g. "trajectory 't7': metric")."""
    for key, value in metrics.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{owner} {key!r} = {value!r} is not a number; trajectory metrics are real numbers "
                            "(put text in info under another key than 'metrics')")
    return {key: float(value) for key, value in metrics.items()}


def to_arrow(trajectories: list[Trajectory], metadata: dict[str, str] | None = None) -> pa.RecordBatch:
    """Flatten trajectories into one record batch, one row per conversation. `metadata` joins the schema's (e.g.
    `tokenizer_metadata`)."""
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    for traj in trajectories:
        if not traj.conversations:
            raise ValueError(f"Trajectory {traj.traj_id!r} has no conversations; every trajectory needs at least one")
        numeric_metrics(traj.metrics, f"trajectory {traj.traj_id!r}: metric")
        for i, conv in enumerate(traj.conversations):
            cols["traj_id"].append(traj.traj_id)
            cols["group_id"].append(traj.group_id)
            cols["conv_index"].append(i)
            cols["num_convs"].append(len(traj.conversations))
            cols["prompt_ids"].append(conv.prompt_ids)
            cols["response_ids"].append(conv.response_ids)
            cols["logprobs"].append(conv.logprobs)
            cols["loss_mask"].append(conv.loss_mask)
            cols["spans"].append(
                [{"name": n, "start": s, "end": e} for n, ranges in conv.spans.items() for s, e in ranges]
            )
            cols["probes"].append([{"name": n, "ids": ids} for n, ids in conv.probes.items()])
            cols["conv_reward"].append(conv.reward)
            cols["finish_reason"].append(conv.finish_reason)
            cols["weight_version"].append(conv.weight_version)
            cols["traj_reward"].append(traj.reward)
            cols["traj_metrics"].append(list(traj.metrics.items()))
            cols["failure"].append(traj.failure)
    arrays = [pa.array(cols[f.name], type=f.type) for f in SCHEMA]
    schema = SCHEMA.with_metadata({**SCHEMA.metadata, **{k.encode(): v.encode() for k, v in (metadata or {}).items()}})
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def from_arrow(batch: pa.RecordBatch | pa.Table) -> list[Trajectory]:
    """Rebuild trajectories from `to_arrow` output; rows of one trajectory must be contiguous."""
    version = (batch.schema.metadata or {}).get(b"memrl.schema_version")
    if version != str(SCHEMA_VERSION).encode():
        raise ValueError(
            f"episode batch has schema version {version!r}; this memrl reads version {SCHEMA_VERSION}"
        )
    missing = set(SCHEMA.names) - set(batch.schema.names)
    if missing:
        raise ValueError(f"episode batch is missing columns {sorted(missing)}")
    # Token columns are split from their flat numpy values (no per-element Python objects); the small
    # per-row columns go through Python lists.
    arrays = {name: _split_list_column(batch.column(name)) for name in _TOKEN_COLUMNS}
    rows = batch.select([n for n in SCHEMA.names if n not in _TOKEN_COLUMNS]).to_pylist()
    trajectories: list[Trajectory] = []
    for k, row in enumerate(rows):
        if row["conv_index"] == 0:
            trajectories.append(
                Trajectory(
                    conversations=[],
                    reward=row["traj_reward"],
                    group_id=row["group_id"],
                    traj_id=row["traj_id"],
                    metrics=dict(row["traj_metrics"]),
                    failure=row["failure"],
                )
            )
        traj = trajectories[-1] if trajectories else None
        if traj is None or traj.traj_id != row["traj_id"] or len(traj.conversations) != row["conv_index"]:
            raise ValueError(
                f"episode batch rows are out of order at trajectory {row['traj_id']!r} conversation "
                f"{row['conv_index']}; rows of a trajectory must be contiguous and in conversation order"
            )
        spans: dict[str, list[tuple[int, int]]] = {}
        for span in row["spans"]:
            spans.setdefault(span["name"], []).append((span["start"], span["end"]))
        traj.conversations.append(
            Conversation(
                prompt_ids=arrays["prompt_ids"][k],
                response_ids=arrays["response_ids"][k],
                logprobs=arrays["logprobs"][k],
                loss_mask=arrays["loss_mask"][k],
                spans=spans,
                probes={probe["name"]: np.asarray(probe["ids"], dtype=np.int32) for probe in row["probes"]},
                reward=row["conv_reward"],
                finish_reason=row["finish_reason"],
                weight_version=row["weight_version"],
            )
        )
    counts = {row["traj_id"]: row["num_convs"] for row in rows}
    for traj in trajectories:
        if len(traj.conversations) != counts[traj.traj_id]:
            raise ValueError(
                f"trajectory {traj.traj_id!r} has {len(traj.conversations)} conversations in the batch "
                f"but num_convs says {counts[traj.traj_id]}"
            )
    return trajectories


_TOKEN_COLUMNS = ("prompt_ids", "response_ids", "logprobs", "loss_mask")


def _split_list_column(column: pa.ListArray | pa.ChunkedArray) -> list[np.ndarray]:
    """One numpy array per row of a list column, as copies of slices of the flat values."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = column.offsets.to_numpy()
    offsets = offsets - offsets[0]  # a sliced column's offsets point into the unsliced values
    values = column.flatten().to_numpy(zero_copy_only=False)
    return [values[offsets[i] : offsets[i + 1]].copy() for i in range(len(column))]


def concat(batches: list[pa.RecordBatch]) -> pa.Table:
    """Join episode batches (e.g. from several env runners) into one table, keeping their schema metadata (which
    must agree: one table's ids come from one tokenizer)."""
    metadata = {} if not batches else batches[0].schema.metadata
    for batch in batches[1:]:
        if batch.schema.metadata != metadata:
            raise ValueError(f"episode batches with different schema metadata cannot be joined: {metadata} and "
                             f"{batch.schema.metadata}")
    return pa.Table.from_batches(batches, schema=SCHEMA.with_metadata(metadata or SCHEMA.metadata))
