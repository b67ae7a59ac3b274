"""Tests for the DeepSpeed ZeRO-3 learners: 2 ranks as Ray actors against plain transformers on one process.

The slow tests share one LearnerGroup and run in file order: the read-only checks first, then the
training check (which needs the group's first optimizer step), then the checkpoint test, which shuts the
group down before starting a fresh one, and the ZeRO-2 check last (at most 2 learner actors at a time).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import ray
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from memrl.learner.learner import build_cpu_comm_op, check_train_rows, clear_stale_build_lock, cpu_comm_op_dir
from memrl.cluster import FaultToleranceConfig
from memrl.learner.batching import pack_rows
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig, lr_factor
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig, compute_loss
from memrl.learner.stitching import stitch
from memrl.weight_sync import broadcast_recv, init_group

TOKEN_BUDGET = 24


def _config(model_path, *, compute_ref: bool = True, logit_temperature: float = 1.0, **changes) -> LearnerConfig:
    """The tests' learners; `changes` sets LearnersConfig or OptimizerConfig fields by name."""
    learners = LearnersConfig(model_path=str(model_path), token_budget=TOKEN_BUDGET,
                              # Partition every parameter, however small, so gathers are really exercised.
                              param_persistence_threshold=0)
    # With eps 1e-8, Adam turns float32 summation-order noise on gradients near 1e-9 (cancellations) into weight
    # differences near 1e-5; 1e-6 damps that so weights can be compared at 1e-5 after lr-1e-3 steps.
    optimizer = {"lr": 1e-3, "weight_decay": 0.01, "betas": [0.9, 0.95], "eps": 1e-6, "grad_clip": 1.0}
    optimizer.update({k: v for k, v in changes.items() if k in OptimizerConfig.__dataclass_fields__})
    learners = dataclasses.replace(learners, **{k: v for k, v in changes.items() if k not in optimizer})
    return LearnerConfig(learners, OptimizerConfig(**optimizer), seed=0, compute_ref=compute_ref,
                         logit_temperature=logit_temperature)


def _rows(seed: int, shapes: list[tuple[int, int]]) -> list[dict[str, np.ndarray]]:
    """Rows with random ids, some loss-masked tokens and varied per-token advantages (no logprobs yet)."""
    rng = np.random.default_rng(seed)
    rows = []
    for prompt_len, resp_len in shapes:
        mask = (rng.random(resp_len) > 0.25).astype(np.int8)
        mask[0] = 1
        rows.append(
            {
                "prompt_ids": rng.integers(3, 1000, prompt_len).astype(np.int32),
                "response_ids": rng.integers(3, 1000, resp_len).astype(np.int32),
                "loss_mask": mask,
                "advantages": (rng.normal() + 0.3 * rng.normal(size=resp_len)).astype(np.float32),
            }
        )
    return rows


def _hf_logprobs(model, row, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Response-token logprobs and entropies of softmax(logits / temperature), from one unpadded transformers forward
    of a single row."""
    prompt, response = np.asarray(row["prompt_ids"]), np.asarray(row["response_ids"])
    ids = torch.tensor(np.concatenate([prompt, response]), dtype=torch.long)[None]
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    token_logp = logp.gather(-1, torch.tensor(response, dtype=torch.long)[:, None]).squeeze(-1)
    return token_logp, -(logp.exp() * logp).sum(-1)


def _load_hf(path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_same_weights(actual: dict, expected: dict, atol: float) -> None:
    assert list(actual) == list(expected)
    for name, tensor in expected.items():
        assert actual[name].shape == tensor.shape, name
        diff = (actual[name] - tensor).abs().max().item()
        assert diff <= atol, f"{name}: max abs diff {diff}"


# --- fast checks (no actors) -------------------------------------------------------------------------------------


def test_config_names_bad_values(tiny_checkpoint):
    with pytest.raises(ValueError, match="learners.model_path '/no/such/checkpoint' is not a local checkpoint"):
        LearnerGroup(_config("/no/such/checkpoint"))  # named before any actor or placement
    with pytest.raises(ValueError, match="learners.attn_implementation='flash' is not allowed"):
        _config(tiny_checkpoint, attn_implementation="flash")
    with pytest.raises(ValueError, match="learners.zero_stage=0 is not allowed"):
        _config(tiny_checkpoint, zero_stage=0)
    with pytest.raises(ValueError, match="learners.dtype='float16' is not allowed"):
        _config(tiny_checkpoint, dtype="float16")
    with pytest.raises(ValueError, match="learners.num_cpus_per_learner=0 is not allowed"):
        _config(tiny_checkpoint, num_cpus_per_learner=0)
    with pytest.raises(ValueError, match="logit_temperature must be > 0"):
        _config(tiny_checkpoint, logit_temperature=0.0)


def test_lr_schedules_warm_up_then_hold_or_decay_to_their_floor(tiny_checkpoint):
    def factors(steps, **schedule):
        config = OptimizerConfig(**schedule)
        return [round(lr_factor(config, k), 6) for k in range(steps)]

    assert factors(4) == [1.0] * 4
    assert factors(5, lr_warmup_steps=2) == [0.5, 1.0, 1.0, 1.0, 1.0]
    assert factors(7, lr_schedule="linear", lr_warmup_steps=2, lr_decay_steps=6) == [0.5, 1, 1, 0.75, 0.5, 0.25, 0]
    assert factors(4, lr_schedule="linear", lr_decay_steps=2, lr_min_ratio=0.2) == [1.0, 0.6, 0.2, 0.2]
    # Half a cosine: 1 at the start of the decay, 0.5 halfway, the floor at its end and after.
    assert factors(6, lr_schedule="cosine", lr_decay_steps=4) == [1.0, 0.853553, 0.5, 0.146447, 0.0, 0.0]
    with pytest.raises(ValueError, match="lr_decay_steps=3 is not allowed with lr_schedule='cosine'"):
        OptimizerConfig(lr_schedule="cosine", lr_warmup_steps=3, lr_decay_steps=3)


def test_a_driver_imports_neither_deepspeed_nor_transformers():
    # A fresh interpreter: this test process has loaded both already. Importing memrl's driver side names the Learner
    # class and the workflows only; transformers comes in when a config's checks load the tokenizer, so a script that
    # only imports (a Tune driver, --help) does not pay the 1.8 s.
    code = ("import sys, memrl.algorithms, memrl.learner.learner_group, memrl.rollout, memrl.workflows; "
            "print('deepspeed' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False False"


def test_a_learner_starts_without_loading_torch_inductor(tiny_checkpoint):
    # DeepSpeed imports its Muon optimizer while it sets up ZeRO, and that module wraps kernels in torch.compile; with
    # TorchDynamo on, that loads TorchInductor (about a second). A fresh process: this one may have loaded it already.
    code = f"""
import os, sys
from memrl.learner.learner import Learner
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig
learner = Learner(LearnerConfig(LearnersConfig(model_path={str(tiny_checkpoint)!r}), OptimizerConfig(), seed=0), 0, 1)
learner.start("127.0.0.1", learner.listen("127.0.0.1"))
print("torch._inductor.compile_fx" in sys.modules, os.environ.get("TORCHDYNAMO_DISABLE"))
"""
    env = {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    # not loaded, and Dynamo is on again afterwards
    assert out.stdout.strip().splitlines()[-1] == "False None", out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_learner_process_keeps_freed_memory_for_reuse():
    # A fresh interpreter each: glibc raises its own threshold after large frees, so this process proves nothing.
    # mallinfo2's hblkhd counts the bytes of blocks served by fresh pages from the OS (mmap).
    code = """
import ctypes, sys, numpy as np
from memrl.learner.learner import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "kept":
    keep_freed_memory()
before = libc.mallinfo2().hblkhd
block = np.ones(4 << 20, dtype=np.uint8)  # 4 MiB, like one activation of a training step
print(libc.mallinfo2().hblkhd - before)
"""
    fresh_pages = {mode: int(subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                                            timeout=300, check=True).stdout.split()[-1])
                   for mode in ("default", "kept")}
    assert fresh_pages["default"] >= 4 << 20  # glibc's default: a block this large comes straight from the OS
    assert fresh_pages["kept"] == 0  # from the heap, where freed blocks are reused


def test_only_an_old_build_lock_is_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert clear_stale_build_lock() is None  # no lock: nothing to do
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(exist_ok=True)
    lock.touch()
    assert clear_stale_build_lock(max_age_s=600) is None and lock.exists()  # a build may be running: kept
    os.utime(lock, (lock.stat().st_atime, lock.stat().st_mtime - 601))
    with pytest.warns(UserWarning, match="removed .*lock, left 60[01] s ago"):
        assert clear_stale_build_lock(max_age_s=600) == lock
    assert not lock.exists()


def test_the_cpu_comm_op_is_built_where_learners_load_it():
    # `make setup` builds it; a learner's DeepSpeed then loads the module from this directory.
    directory = build_cpu_comm_op()
    assert directory == cpu_comm_op_dir() and (directory / "deepspeed_shm_comm.so").is_file()


def test_train_rows_are_checked_before_any_rank_runs():
    rows = _rows(0, [(3, 4), (2, 2)])
    for row in rows:
        row["old_logprobs"] = np.zeros(len(row["response_ids"]), np.float32)
    assert check_train_rows(rows) is False
    rows[0]["ref_logprobs"] = rows[0]["old_logprobs"]
    with pytest.raises(ValueError, match="all rows or none"):
        check_train_rows(rows)
    rows[1]["ref_logprobs"] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="row 1: 'ref_logprobs'"):
        check_train_rows(rows)
    del rows[0]["advantages"]
    with pytest.raises(ValueError, match="row 0 is missing"):
        check_train_rows(rows)


# --- one shared 2-rank group ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def group(ray_session, tiny_checkpoint):
    """Two ZeRO-3 ranks with gradient checkpointing, as the GPU presets train: every figure below must equal the
    plain model's on one process."""
    g = LearnerGroup(_config(tiny_checkpoint, num_learners=2, gradient_checkpointing=True))
    yield g
    g.shutdown()


@pytest.mark.slow
def test_zero3_logprobs_match_transformers(group, tiny_checkpoint):
    model = _load_hf(tiny_checkpoint)
    rows = _rows(1, [(20, 16), (6, 6), (5, 5), (1, 3), (4, 4), (30, 2)])
    with torch.no_grad():
        expected = [_hf_logprobs(model, row) for row in rows]
    for reference in (False, True):
        logprobs, entropy = group.compute_logprobs(rows, reference=reference)
        for (exp_lp, exp_ent), lp, ent in zip(expected, logprobs, entropy):
            np.testing.assert_allclose(lp, exp_lp.numpy(), atol=1e-5, rtol=0)
            np.testing.assert_allclose(ent, exp_ent.numpy(), atol=1e-5, rtol=0)
    # One row: the other rank holds none and only runs padding passes.
    (lp,), _ = group.compute_logprobs(rows[:1])
    np.testing.assert_allclose(lp, expected[0][0].numpy(), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_zero3_stitched_rows_match_each_conversation_alone(group):
    """A token-tree row (4D mask, depth positions) through the ZeRO-3 ranks equals its conversations run alone."""
    rng = np.random.default_rng(7)
    task = rng.integers(3, 1000, 9)
    conversations = [(task, rng.integers(3, 1000, 5))]
    for turn in range(4):  # each turn: the task prompt, then new context (an earlier state, information), then a reply
        conversations.append((np.concatenate([task, rng.integers(3, 1000, 4 + turn)]), rng.integers(3, 1000, 3)))
    stitched = stitch(conversations)
    rows = [{"prompt_ids": stitched.prompt_ids, "response_ids": stitched.response_ids, "parents": stitched.parents}]
    separate = [{"prompt_ids": p, "response_ids": r} for p, r in conversations]
    (tree_lp,), (tree_ent,) = group.compute_logprobs(rows)
    want_lp, want_ent = group.compute_logprobs(separate)
    for got, want in zip(stitched.gather(tree_lp), want_lp, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    for got, want in zip(stitched.gather(tree_ent), want_ent, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_gathered_weights_equal_checkpoint_and_broadcast_delivers_them(group, tiny_checkpoint):
    state = group.gather_state_dict()
    expected = _load_hf(tiny_checkpoint).state_dict()
    assert list(state) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name
    metas = group.weight_metas()
    assert [(n, s) for n, s, _ in metas] == [(n, tuple(t.shape)) for n, t in expected.items()]

    port = _free_port()
    joins = group.init_weight_sync("127.0.0.1", port, 2, "gloo", wait=False)
    pg = init_group("127.0.0.1", port, 1, 2, "gloo", timeout_s=120)
    ray.get(joins)
    bucket_bytes = 1 << 16  # several buckets, so the gather-per-bucket path runs many times
    sends = group.broadcast_weights(version=7, bucket_bytes=bucket_bytes, wait=False)
    received = {name: t.clone() for name, t in broadcast_recv(pg, metas, bucket_bytes)}
    info = ray.get(sends)[0]
    assert info["version"] == 7
    assert info["bytes"] == sum(t.numel() * t.element_size() for t in expected.values())
    assert list(received) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(received[name], tensor), name


@pytest.mark.slow
def test_train_step_refuses_rows_without_loss_tokens(group):
    rows = _rows(0, [(3, 4)])
    rows[0]["loss_mask"][:] = 0
    rows[0]["old_logprobs"] = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="loss token"):
        group.train_step(rows, LossConfig())
    with pytest.raises(ValueError, match="at least one row"):
        group.train_step([], LossConfig())


# Step 1: rank 0 gets the 36-token row (1 micro-batch), rank 1 the four short rows (2 micro-batches).
# Step 2: a single row, so rank 1 runs only padding passes. Step 3: a mixed batch.
TRAIN_SHAPES = [
    [(20, 16), (6, 6), (5, 5), (4, 5), (4, 4)],
    [(12, 20)],
    [(3, 9), (7, 2), (10, 10), (2, 5), (8, 8), (5, 3), (1, 12)],
]


@pytest.mark.slow
def test_train_step_equals_single_process_full_batch(group, tiny_checkpoint):
    import ray

    # The ranks recompute each layer in backward (the group's config); the figures are the plain model's all the same.
    assert all(ray.get([a.__ray_call__.remote(lambda self: self.engine.module.is_gradient_checkpointing)
                        for a in group.learners], timeout=60))
    _check_train_steps_match_single_process(group, _config(tiny_checkpoint), TRAIN_SHAPES)


def _check_train_steps_match_single_process(group, config, steps_shapes):
    """Train the group's fresh optimizer and plain torch AdamW on the same rows; compare loss, norm, weights."""
    loss_config = LossConfig(kl_coef=0.1, entropy_coef=0.01)
    model = _load_hf(config.model_path).train()
    initial = _load_hf(config.model_path)
    opt = config.optimizer
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay
    )
    rng = np.random.default_rng(0)
    for step, shapes in enumerate(steps_shapes):
        rows = _rows(10 + step, shapes)
        logprobs, _ = group.compute_logprobs(rows)
        ref_logprobs, _ = group.compute_logprobs(rows, reference=True)
        for row, lp, ref in zip(rows, logprobs, ref_logprobs):
            # Off-policy enough that some ratios leave the clip range.
            row["old_logprobs"] = (lp + rng.normal(scale=0.3, size=lp.shape)).astype(np.float32)
            row["ref_logprobs"] = ref
            with torch.no_grad():
                # The reference model stays at the initial weights while the policy trains.
                expected = _hf_logprobs(initial, row, config.logit_temperature)[0].numpy()
                np.testing.assert_allclose(ref, expected, atol=1e-5, rtol=0)

        started = time.perf_counter()
        metrics = group.train_step(rows, loss_config)
        # The slowest rank's seconds, within the call's own (summed over the two ranks, which run side by side,
        # it would be about twice the step).
        assert 0 < metrics["step_s"] <= time.perf_counter() - started
        if step in (0, 1) and group.num_learners > 1:
            # Ranks ran different numbers of real micro-batches; the short one padded with empty passes.
            assert metrics["forward_passes"] > metrics["micro_batches"]

        # The same loss on one process, full batch: per-row terms normalised by the global counts sum to the mean.
        num_tokens = float(sum(int(row["loss_mask"].sum()) for row in rows))
        optimizer.zero_grad()
        total_loss = 0.0
        for row in rows:
            lp, ent = _hf_logprobs(model, row, config.logit_temperature)
            loss, _ = compute_loss(
                loss_config,
                lp[None],
                torch.tensor(row["old_logprobs"])[None],
                torch.tensor(row["advantages"])[None],
                torch.tensor(row["loss_mask"], dtype=torch.float32)[None],
                num_tokens,
                float(len(rows)),
                ref_logprobs=torch.tensor(row["ref_logprobs"])[None],
                entropy=ent[None],
            )
            loss.backward()
            total_loss += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), opt.grad_clip).item()
        optimizer.step()

        assert metrics["tokens"] == num_tokens and metrics["rows"] == len(rows)
        assert metrics["loss"] == pytest.approx(total_loss, rel=1e-5, abs=1e-6)
        # Adam hides a constant loss scale, the gradient norm does not: this pins the global normalisation.
        assert metrics["grad_norm"] == pytest.approx(grad_norm, rel=1e-5)
        assert grad_norm > opt.grad_clip  # clipping is active, so its global norm matters too
        assert metrics["lr"] == opt.lr
        _assert_same_weights(group.gather_state_dict(), dict(model.named_parameters()), atol=1e-5)


@pytest.mark.slow
def test_checkpoint_round_trip_and_hf_export(group, tiny_checkpoint, tmp_path):
    config = _config(tiny_checkpoint, num_learners=2)
    rows = _rows(99, [(5, 7), (9, 3), (2, 11)])
    logprobs, _ = group.compute_logprobs(rows)
    for row, lp in zip(rows, logprobs):
        row["old_logprobs"] = lp
    # A first step so the saved state has non-trivial optimizer moments.
    group.train_step(rows, LossConfig())
    group.save_checkpoint(str(tmp_path / "ckpt"))
    group.save_hf(str(tmp_path / "hf"))
    saved = group.gather_state_dict()
    next_metrics = group.train_step(rows, LossConfig())
    next_weights = group.gather_state_dict()
    group.shutdown()

    exported = _load_hf(tmp_path / "hf")
    _assert_same_weights(dict(exported.named_parameters()), saved, atol=0.0)
    assert len(AutoTokenizer.from_pretrained(tmp_path / "hf")) == len(AutoTokenizer.from_pretrained(tiny_checkpoint))

    fresh = LearnerGroup(config)
    try:
        fresh.load_checkpoint(str(tmp_path / "ckpt"))
        _assert_same_weights(fresh.gather_state_dict(), saved, atol=0.0)
        metrics = fresh.train_step(rows, LossConfig())
        for key in ("loss", "grad_norm", "pg_loss", "clip_frac"):
            assert metrics[key] == pytest.approx(next_metrics[key], rel=1e-6, abs=1e-7), key
        _assert_same_weights(fresh.gather_state_dict(), next_weights, atol=1e-7)
        with pytest.raises(Exception, match="no DeepSpeed checkpoint"):
            fresh.load_checkpoint(str(tmp_path / "empty"))
    finally:
        fresh.shutdown()


@pytest.mark.slow
def test_padding_free_learners_train_and_score_as_the_plain_model(tiny_checkpoint):
    """Rows packed without padding (learners.padding_free) in a learner here (num_learners=0): the policy's and the
    reference's logprobs, the loss, the gradient norm and the weights after each step are those of the plain model
    on one row at a time; a critic's values are the padded critic's, token trees included (they stay padded)."""
    config = _config(tiny_checkpoint, num_learners=0, padding_free=True)
    group = LearnerGroup(config)
    try:
        _check_train_steps_match_single_process(group, config, TRAIN_SHAPES)
        # Step 1's rows in packed micro-batches of at most 24 real tokens: 36 alone, then 12 + 10, then 9 + 8.
        batches, layout = group.learners[0]._learner._micro_batches(_rows(0, TRAIN_SHAPES[0]))
        assert batches == [[0], [1, 2], [3, 4]] and layout is pack_rows
    finally:
        group.shutdown()
    conversations = [(np.arange(3, 10 + k), np.arange(20, 24 + k)) for k in range(3)]
    plain = [{"prompt_ids": p, "response_ids": r} for p, r in conversations]
    s = stitch(conversations)
    tree = [{"prompt_ids": s.prompt_ids, "response_ids": s.response_ids, "parents": s.parents}]
    values = []
    for padding_free in (False, True):
        learners = LearnersConfig(model_path=str(tiny_checkpoint), num_learners=0, token_budget=TOKEN_BUDGET,
                                  padding_free=padding_free)
        critic = LearnerGroup(LearnerConfig(learners, OptimizerConfig(), seed=0, head="value"))
        try:
            values.append((critic.compute_values(plain), critic.compute_values(tree)))
        finally:
            critic.shutdown()
    for padded, packed in zip(values[0][0] + values[0][1], values[1][0] + values[1][1], strict=True):
        np.testing.assert_allclose(packed, padded, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_zero2_tempered_train_step_equals_single_process(ray_session, tiny_checkpoint):
    # Runs after the shared group is gone (at most 2 learner actors at a time). Tempered: the logprobs, entropy, KL
    # and gradients are those of softmax(logits / 0.7), as on one process.
    config = _config(tiny_checkpoint, num_learners=2, zero_stage=2, logit_temperature=0.7)
    zero2 = LearnerGroup(config)
    try:
        _check_train_steps_match_single_process(zero2, config, TRAIN_SHAPES[:2])
    finally:
        zero2.shutdown()


@pytest.mark.slow
def test_lr_schedule_drives_the_optimizer_and_resumes_where_it_was(ray_session, tiny_checkpoint, tmp_path):
    # Warm-up over 2 steps, then linear decay to 0 at step 4: lr x 0.5, 1, 1, 0.5, 0. The learner runs in this
    # process (num_learners=0): the schedule and its resume are the point, not where the learner runs.
    config = _config(tiny_checkpoint, num_learners=0, compute_ref=False, lr_schedule="linear", lr_warmup_steps=2,
                     lr_decay_steps=4)
    rows = _rows(5, [(5, 7), (9, 3)])
    group = LearnerGroup(config)
    try:
        logprobs, _ = group.compute_logprobs(rows)
        for row, lp in zip(rows, logprobs):
            row["old_logprobs"] = lp
        lrs = [group.train_step(rows, LossConfig())["lr"] for _ in range(2)]
        group.save_checkpoint(str(tmp_path / "ckpt"))
        lrs.append(group.train_step(rows, LossConfig())["lr"])
    finally:
        group.shutdown()
    fresh = LearnerGroup(config)
    try:
        fresh.load_checkpoint(str(tmp_path / "ckpt"))
        lrs += [fresh.train_step(rows, LossConfig())["lr"] for _ in range(2)]  # steps 2 (again) and 3
        before = fresh.gather_state_dict()
        lrs.append(fresh.train_step(rows, LossConfig())["lr"])
        # The optimizer really takes the schedule's rate: at 0 neither Adam nor weight decay moves a weight.
        _assert_same_weights(fresh.gather_state_dict(), before, atol=0.0)
    finally:
        fresh.shutdown()
    assert lrs == pytest.approx([0.5e-3, 1e-3, 1e-3, 1e-3, 0.5e-3, 0.0])


def test_learners_start_past_a_build_lock_a_killed_run_left_and_train_on_the_cpus_they_reserve(ray_session,
                                                                                              tiny_checkpoint):
    # A run stopped while its learners loaded DeepSpeed's CPU op leaves torch's build lock behind; without clearing
    # it, the next learners wait on it until their start deadline.
    lock = cpu_comm_op_dir() / "lock"
    lock.touch()
    os.utime(lock, (time.time() - 3600, time.time() - 3600))
    threads = min(2, len(os.sched_getaffinity(0)))  # torch never runs more threads than the machine has cores
    group = LearnerGroup(_config(tiny_checkpoint, compute_ref=False, num_cpus_per_learner=threads),
                         faults=FaultToleranceConfig(actor_start_timeout_s=180))
    try:
        assert not lock.exists()
        assert len(group.weight_metas()) > 0
        counts = ray.get([a.__ray_call__.remote(lambda self: torch.get_num_threads()) for a in group.learners],
                         timeout=120)
        assert counts == [threads]
    finally:
        group.shutdown()
        lock.unlink(missing_ok=True)
