"""Algorithm: the RL training loop over env runners, inference engines and a learner group (a Trainer, and so a Ray
Tune Trainable; memrl.algorithms.trainer holds what it shares with SFT: checkpoints and learner recovery).

An iteration: sample groups of trajectories -> advantages -> one learner step -> broadcast the new
weights to every engine. Everything that makes an iteration random is derived from (seed, iteration),
so a run restored from a checkpoint continues exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.exceptions import RayActorError, RayTaskError

from memrl import rendezvous, weight_sync
from memrl.algorithms.prefetch import (PhaseClock, Prefetch, SampledBatch, SamplingAhead, load_batches,
                                      save_batches)
from memrl.algorithms.recovery import EngineRecovery, wait_engines_ready
from memrl.algorithms.trainer import Trainer
from memrl.cluster import FailureBudget, get
from memrl.console import verbose
from memrl.engines import start_engine, stop_engine
from memrl.episode import Trajectory, from_arrow
from memrl.evaluation import sample_heldout
from memrl.learner.advantages import ADVANTAGES, AdvantageInputs, dynamic_sampling_mask, shape_rewards
from memrl.learner.learner_group import LearnerFailed, LearnerGroup
from memrl.learner.rows import RowBatch, TrainRow, build_rows, importance_figures
from memrl.rollout import EngineFailed, EnvRunnerGroup, EnvRunnerSpec, Task
from memrl.seeds import derive_seed, training_env_seeds
from memrl.stats import eval_summary, summarize
from memrl.tokenizer import tokenizer_class_path


class Algorithm(EngineRecovery, Trainer):
    """The RL trainer: engines, env runners and learners from an AlgorithmConfig; subclasses choose the defaults
    (and PPO its critic)."""

    # -- construction --------------------------------------------------------------------
    def build(self) -> None:
        """Engines, env runners and learners (started side by side), then the weight-sync group."""
        run, dbg = self.cfg.env_runners_cfg, self.cfg.debugging_cfg
        self.weight_version = 0
        self.counters = {"trajectories_sampled": 0, "trajectories_trained": 0, "trajectories_failed": 0,
                         "groups_dropped": 0, "trajectories_dropped": 0, "trajectories_stale": 0,
                         "conversations_trained": 0, "engine_restarts": 0, "learner_restarts": 0}
        faults = self.cfg.fault_tolerance_cfg
        self._engine_budget = FailureBudget(faults.max_actor_failures, faults.failure_window_s, "inference engine")
        # Named for the runners, which may run on nodes whose cache has not seen the checkpoint: they import the class.
        self._tokenizer_class = tokenizer_class_path(self.cfg.learners_cfg.model_path)
        # Engines and runners load while the learners start: the three kinds of actor come up side by side.
        self.engines = [self._make_engine(i) for i in range(run.num_engines or 1)]
        self.env_runner_group = self._runner_group(self._runner_spec({}, run.sampling.temperature), wait=False)
        self.start_learners()
        wait_engines_ready(self.engines, self.cfg)
        self.env_runner_group.wait_started()
        self._prefetched: dict[int, SampledBatch] = {}  # batches sampled ahead, by the iteration they are for
        self._failed_in_a_row = 0  # iterations just before this one in which every episode failed
        self._eval_group: EnvRunnerGroup | None = None
        self._init_weight_sync()
        self._wandb = None
        # WANDB_MODE=disabled is wandb's own off switch; honoured without importing wandb.
        if dbg.wandb_project and os.environ.get("WANDB_MODE") != "disabled":
            import wandb

            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
            # dir read here, not once per process by wandb's own setup, so each run honours WANDB_DIR as it is now.
            self._wandb = wandb.init(project=dbg.wandb_project, config=self.cfg.to_dict(), mode=mode,
                                     reinit="create_new", dir=os.environ.get("WANDB_DIR"),
                                     settings=wandb.Settings(silent=not verbose()))

    def _runner_spec(self, env_overrides: dict, temperature: float, num_envs: int | None = None) -> EnvRunnerSpec:
        """What each env runner builds: the configured env (with overrides) and workflow, sampled at `temperature`,
        with `num_envs` episodes in flight (None: env_runners.num_envs_per_env_runner)."""
        env, run = self.cfg.environment_cfg, self.cfg.env_runners_cfg
        return EnvRunnerSpec(env=env.env, env_config={**env.env_config, **env_overrides}, workflow=run.workflow,
                             workflow_config=run.workflow_config, tokenizer_path=self.cfg.learners_cfg.model_path,
                             sampling=dataclasses.replace(run.sampling, temperature=temperature),
                             num_envs=num_envs or run.num_envs_per_env_runner, max_calls=run.max_calls_per_episode,
                             tokenizer_class=self._tokenizer_class, faults=self.cfg.fault_tolerance_cfg,
                             continuous_batching=run.batches_continuously)

    def _runner_group(self, spec: EnvRunnerSpec, wait: bool = True) -> EnvRunnerGroup:
        """env_runners.num_env_runners runners of `spec` over the engines, with the run's failure budget; `wait`:
        return once they are up."""
        run = self.cfg.env_runners_cfg
        return EnvRunnerGroup(spec, self.engines, run.num_env_runners,
                              resources_per_runner=run.resources_per_env_runner, wait=wait)

    def _heldout_group(self, spec: EnvRunnerSpec) -> EnvRunnerGroup:
        """The runners of held-out episodes, where evaluation.evaluation_num_env_runners puts them: None, laid out as
        training's; 0, that layout in this process; k, k runner actors."""
        run = self.cfg.env_runners_cfg
        count = self.cfg.evaluation_cfg.evaluation_num_env_runners
        if count is None:
            return self._runner_group(spec)
        if count == 0:
            return EnvRunnerGroup(spec, self.engines, run.num_env_runners, in_process=True)
        return EnvRunnerGroup(spec, self.engines, count, resources_per_runner=run.resources_per_env_runner)

    def _make_engine(self, index: int):
        """Engine `index` of env_runners.num_engines actors, or with num_engines=0 the one in this process."""
        run = self.cfg.env_runners_cfg
        in_process = run.num_engines == 0
        return start_engine(self.cfg.learners_cfg.model_path, run.engine, seed=self.seed + index,
                            num_gpus=run.num_gpus_per_engine, num_cpus=run.num_cpus_per_engine,
                            resources=run.resources_per_engine,
                            placement=None if in_process else self.placement("engines", index),
                            continuous_batching=run.batches_continuously, in_process=in_process,
                            tempered_logprobs=self.cfg.training_cfg.tempered_logprobs, **run.engine_config)

    def _init_weight_sync(self) -> None:
        """Learner rank 0 and every engine worker that holds weights (weight_sync.group_layout) join one group."""
        backend = self.cfg.weight_sync_backend()
        learner_ip = self.learner_group.node_ip()
        n = len(self.engines)
        found = get([e.node_ip.remote() for e in self.engines] + [e.weight_sync_ranks.remote() for e in self.engines],
                    self.cfg.fault_tolerance_cfg.actor_start_timeout_s, "engines' node addresses and workers",
                    "fault_tolerance.actor_start_timeout_s")
        world, first_ranks = weight_sync.group_layout(found[n:])
        host = rendezvous.group_host(learner_ip, found[:n])
        port = self.learner_group.listen_weight_sync(host)  # held by rank 0 until the group forms: no port race
        learner_refs = self.learner_group.init_weight_sync(host, port, world, backend, wait=False)
        engine_refs = [e.init_weight_sync.remote(host, port, first, world, backend)
                       for e, first in zip(self.engines, first_ranks)]
        limit, setting = self.cfg.fault_tolerance_cfg.weight_sync_timeout_s, "fault_tolerance.weight_sync_timeout_s"
        what = f"joining the weight-sync group ({backend}, learner rank 0 and {n} engines' {world - 1} workers)"
        get(engine_refs, limit, what, setting)
        self.learner_group.wait(learner_refs, what, limit, setting)
        self._weight_metas = self.learner_group.weight_metas()

    def _rejoin_learners(self, failure: Exception) -> None:
        """Connect new learner groups to the rest of the run: engines that broke with them replaced, weight sync."""
        broken = self._broken_engines()
        if broken:
            self._start_engines(broken, failure)
        self._init_weight_sync()

    def _counter_dicts(self) -> list[dict[str, int]]:
        return [self.counters, self.env_runner_group.counters]

    # -- one iteration -------------------------------------------------------------------
    def _step(self, replay: bool = False) -> dict[str, Any]:
        """One iteration (`replay`: one run again after a learner recovery, not logged again).

        Synchronous (training.max_staleness 0): sample, learn, broadcast. Asynchronous (k >= 1): the iteration's
        batch was sampled k iterations ahead; while the learner trains on it, the engines sample the batches up to
        k iterations on, which are collected before the new weights are broadcast (with partial_rollouts, after).
        An iteration that fails once its learners have begun to train is never run again on top of that: the next call
        recovers the learners from the newest periodic checkpoint (Trainer.step) or fails naming the iteration."""
        iteration = self.iteration  # completed iterations so far (Tune's counter, restored with checkpoints)
        partial = self.cfg.training_cfg.partial_rollouts
        clock = PhaseClock()
        sampled = self._prefetched.pop(iteration, None)
        if sampled is None:
            sampled = self._sample_training_batch(iteration)
        self._check_not_all_failed(sampled)
        clock.mark("sampled")
        ahead = self._start_sampling_ahead(iteration)
        sync = None
        try:
            self._unfinished = (f"iteration {iteration + 1} failed once its learners had begun to train; running it "
                                f"again would train them on its batch twice")
            learner_metrics, off_policy = self._learn(sampled.kept)
            clock.mark("learned")
            if ahead is not None and partial:
                sync = self.sync_weights()  # the prefetched episodes' next calls run under the new weights
        except BaseException:
            if ahead is not None:
                ahead.prefetch.discard(self._prefetch_timeout_s())
            raise
        engines_failed = self._collect_sampled_ahead(ahead) if ahead is not None else None
        seconds, engines_lost = self._engine_seconds()
        clock.mark("collected")
        if sync is None:
            sync = self.sync_weights()
        elif engines_failed is not None or engines_lost:
            self._broadcast_weights()  # the replaced engines get the weights the others hold
        if engines_failed is not None:
            # With partial rollouts the batches sampled ahead cross versions by design; those the failure left
            # unsampled are sampled again now that every engine holds the new weights.
            self._sample_missing(ahead.targets)
        clock.mark("synced")
        result = self._result(sampled, learner_metrics, off_policy, sync, clock, generate_s=max(seconds))
        interval = self.cfg.evaluation_cfg.evaluation_interval
        if interval and (iteration + 1) % interval == 0:
            result["evaluation"] = self.evaluate()
        self._unfinished = None
        if self._wandb is not None and not replay:
            self._wandb.log(_flatten(result), step=iteration + 1)
        return result

    def _start_sampling_ahead(self, iteration: int) -> SamplingAhead | None:
        """Start sampling, in a background thread, the batches of the next max_staleness iterations not sampled yet
        (one per iteration once the pipeline is full); None when there are none."""
        horizon = range(iteration + 1, iteration + self.cfg.training_cfg.max_staleness + 1)
        targets = [j for j in horizon if j not in self._prefetched]
        if not targets:
            return None
        ahead = SamplingAhead(targets)

        def sample() -> None:
            for j in targets:  # kept as each is done: a failure later on leaves them sampled and counted once
                ahead.ready.append(self._sample_training_batch(j, recover=False))

        ahead.prefetch = Prefetch(sample, f"sampling the batches of iterations {targets}")
        return ahead

    def _collect_sampled_ahead(self, ahead: SamplingAhead) -> EngineFailed | None:
        """Wait for the batches sampled ahead and keep them. An engine failure on the way replaces the engine (for the
        broadcast that comes next); without partial rollouts the batches it left unsampled are sampled now under the
        weights they were meant for (the new engines get them again from learner rank 0's copy), as an uninterrupted
        run samples them. Returns the failure when that is left for after the broadcast (partial rollouts)."""
        failure = None
        try:
            ahead.prefetch.result(self._prefetch_timeout_s(), "fault_tolerance.sample_timeout_s")
        except EngineFailed as engine_failure:
            failure = engine_failure
            self._replace_engines_for_sync(failure)
        self._prefetched.update({batch.iteration: batch for batch in ahead.ready})
        if failure is not None and not self.cfg.training_cfg.partial_rollouts:
            self._resend_kept_weights()
            self._sample_missing(ahead.targets)
            return None
        return failure

    def _sample_missing(self, targets: list[int]) -> None:
        """Sample now the batches of `targets` that are not sampled yet."""
        for j in targets:
            if j not in self._prefetched:
                self._prefetched[j] = self._sample_training_batch(j)

    def _result(self, sampled: SampledBatch, learner_metrics: dict, off_policy: dict, sync: dict,
                clock: PhaseClock, generate_s: float) -> dict[str, Any]:
        """The iteration's result: its trajectories' figures, the learners', the phase timers, the weight sync's and
        the episode counters. `generate_s` is the busiest engine's generation this iteration, whichever batch it was
        for."""
        trajectories, runner_stats = sampled.trajectories, sampled.stats
        new_tokens = runner_stats.get("new_tokens", 0.0)
        # Waiting for sampling: the whole sampling phase when synchronous, the wait for the prefetched batch when not.
        wait_s = clock.span("start", "sampled") + clock.span("learned", "collected")
        learn_s, iteration_s = clock.span("sampled", "learned"), clock.span("start", "synced")
        result = {
            "env_runners": {**summarize(trajectories), "num_trajectories": len(trajectories),
                            "new_tokens": new_tokens, "calls": runner_stats.get("calls", 0.0),
                            "engine_batches": runner_stats.get("batches", 0.0)},
            "learners": learner_metrics,
            "timers": {"sample_s": wait_s, "generate_s": generate_s,
                       "env_s": runner_stats.get("env_s", 0.0), "learn_s": learn_s,
                       "sync_s": clock.span("collected", "synced"), "iteration_s": iteration_s,
                       # Share of the iteration in which neither an engine generates nor the learner works. The busiest
                       # engine's generation is credited only while the driver waits for samples (it overlaps the
                       # learner step when asynchronous), so the share is never negative.
                       "outside_model_fraction": 1.0 - (learn_s + min(generate_s, wait_s)) / iteration_s},
            "throughput": {"rollout_new_tokens_per_s": new_tokens / max(sampled.seconds, 1e-9)},
            "weight_sync": {**sync, "version_lag": float(self.weight_version - 1 - min(
                (t.weight_version for t in trajectories), default=self.weight_version - 1))},
            "off_policy": off_policy,
            # Kept trajectories of the batches sampled ahead, still to be trained on (their failed and dropped ones are
            # counted already): sampled = trained + failed + dropped + stale + prefetched.
            "counters": {**self.counters, "trajectories_prefetched": float(
                sum(len(batch.kept) for batch in self._prefetched.values())),
                **self.env_runner_group.counters},
        }
        result["reward_mean"] = result["env_runners"].get("reward_mean", float("nan"))
        return result

    def _check_not_all_failed(self, sampled: SampledBatch) -> None:
        """Raise AllEpisodesFailed once fault_tolerance.failed_iterations_to_stop iterations in a row had every episode
        fail (nothing to train on), naming the first failure."""
        failures = [t.failure for t in sampled.trajectories if t.failure]
        if not failures or len(failures) < len(sampled.trajectories):
            self._failed_in_a_row = 0
            return
        self._failed_in_a_row += 1
        limit = self.cfg.fault_tolerance_cfg.failed_iterations_to_stop
        if self._failed_in_a_row >= limit:
            self._failed_in_a_row = 0
            raise AllEpisodesFailed(
                f"every one of the {len(failures)} episodes of iteration {sampled.iteration + 1} failed"
                + (f" ({limit} iterations in a row)" if limit > 1 else "")
                + f", so nothing was trained; the first failure: {failures[0]}. Is a service the env needs down "
                "(its retriever, its answerer)? fault_tolerance.failed_iterations_to_stop sets how many such "
                "iterations a run takes")

    def _learn(self, kept: list[Trajectory]) -> tuple[dict[str, float], dict[str, float]]:
        """Train on the kept trajectories that are fresh enough -> (learner metrics, off-policy figures)."""
        train = self.cfg.training_cfg
        staleness = np.array([self.weight_version - c.weight_version for t in kept for c in t.conversations])
        off_policy = {f"staleness_{v}": float(n) for v, n in zip(*np.unique(staleness, return_counts=True))}
        stale_groups = {t.group_id for t in kept if self.weight_version - t.weight_version > train.max_staleness}
        fresh = [t for t in kept if t.group_id not in stale_groups]
        self.counters["trajectories_stale"] += len(kept) - len(fresh)
        if not fresh:
            return {}, off_policy
        batch = build_rows(fresh, stitched=train.stitch_trajectories)
        if not train.use_rollout_logprobs:
            rollout = [row["old_logprobs"] for row in batch.rows]
            if train.loss.off_policy_correction != "none":
                batch.set("rollout_logprobs", rollout)
            batch.set("old_logprobs", self.learner_group.compute_logprobs(batch.rows)[0])
            off_policy.update(importance_figures(batch.rows, rollout, train.loss.importance_cap))
        if train.loss.kl_coef > 0:
            batch.set("ref_logprobs", self.learner_group.compute_logprobs(batch.rows, reference=True)[0])
        advantage_metrics = self.compute_advantages(fresh, batch)
        learner_metrics = {**self._train_minibatches(batch.rows, fresh), **advantage_metrics}
        self.counters["trajectories_trained"] += len(fresh)
        self.counters["conversations_trained"] += sum(len(t.conversations) for t in fresh)
        return learner_metrics, off_policy

    def _prefetch_timeout_s(self) -> float:
        """Deadline of a prefetched batch: every sampling round may take sample_timeout_s per runner restart."""
        train, faults = self.cfg.training_cfg, self.cfg.fault_tolerance_cfg
        rounds = train.dynamic_sampling_max_rounds if train.dynamic_sampling else 1
        return faults.sample_timeout_s * rounds * (faults.max_actor_failures + 1)

    def _sample_training_batch(self, iteration: int, recover: bool = True) -> SampledBatch:
        """Sample the iteration's groups. Failed episodes are counted and left out. With dynamic sampling, groups whose
        rewards are all equal are dropped and further rounds of fresh groups are sampled (up to
        dynamic_sampling_max_rounds) until tasks_per_iteration groups are kept; groups beyond those are dropped too.

        `recover` False leaves an engine failure to the caller (a prefetching thread must not rebuild the weight-sync
        group while the learner trains). Counters are updated once the whole batch is in."""
        train = self.cfg.training_cfg
        rounds = train.dynamic_sampling_max_rounds if train.dynamic_sampling else 1
        tables = []
        trajectories: list[Trajectory] = []
        kept: list[Trajectory] = []
        stats: dict[str, float] = {}
        failed = groups_dropped = 0
        start = time.perf_counter()
        for round_ in range(rounds):
            tasks, seed = self._training_tasks(iteration, round_), derive_seed(self.seed, iteration, round_)
            if recover:
                table, round_stats = self.sample(self.env_runner_group, tasks, seed=seed)
            else:
                table, round_stats = self.env_runner_group.sample(tasks, seed=seed)
            tables.append(table)
            batch = from_arrow(table)
            trajectories += batch
            # An episode the env could not finish (its retriever failed) says nothing of the policy: not trained on.
            failed += sum(1 for t in batch if t.failure)
            batch = [t for t in batch if not t.failure]
            for k, v in round_stats.items():
                stats[k] = stats.get(k, 0.0) + v
            if train.dynamic_sampling:
                keep = dynamic_sampling_mask([self._sampling_value(t) for t in batch], [t.group_id for t in batch])
                groups_dropped += len({t.group_id for t, k in zip(batch, keep) if not k})
                kept += [t for t, k in zip(batch, keep) if k]
            else:
                kept += batch
            if len({t.group_id for t in kept}) >= train.tasks_per_iteration:
                break
        groups = set(list(dict.fromkeys(t.group_id for t in kept))[: train.tasks_per_iteration])
        kept = [t for t in kept if t.group_id in groups]
        self.counters["trajectories_sampled"] += len(trajectories)
        self.counters["trajectories_failed"] += failed
        self.counters["groups_dropped"] += groups_dropped
        self.counters["trajectories_dropped"] += len(trajectories) - failed - len(kept)
        return SampledBatch(iteration, pa.concat_tables(tables), trajectories, kept, stats,
                            time.perf_counter() - start)

    def _sampling_value(self, trajectory: Trajectory) -> float:
        """What dynamic sampling compares within a group: the reward, or training.dynamic_sampling_metric."""
        metric = self.cfg.training_cfg.dynamic_sampling_metric
        if metric is None:
            return trajectory.reward
        if metric not in trajectory.metrics:
            raise ValueError(f"training.dynamic_sampling_metric={metric!r} is not a figure of this env's trajectories; "
                             f"they have {sorted(trajectory.metrics)} (or None to compare rewards)")
        return float(trajectory.metrics[metric])

    def _training_tasks(self, iteration: int, round_: int = 0) -> list[Task]:
        """A round's tasks: a fixed function of (seed, iteration, round); even env seeds (odd ones are held out)."""
        train = self.cfg.training_cfg
        env_seeds = training_env_seeds(self.seed, iteration, round_, train.tasks_per_iteration)
        prefix = f"it{iteration}-r{round_}"
        return [
            Task(seed=s, group_id=f"{prefix}-g{g}", traj_id=f"{prefix}-g{g}-{k}")
            for g, s in enumerate(env_seeds)
            for k in range(train.group_size)
        ]

    def compute_advantages(self, trajectories: list[Trajectory], batch: RowBatch) -> dict[str, float]:
        """Give every row of `batch` its per-token "advantages" with training.advantage_estimator, from the rewards
        training.reward_shapers leave (memrl.learner.advantages); returns figures for the result's "learners"
        section."""
        train = self.cfg.training_cfg
        inputs = AdvantageInputs(trajectories, batch, train, self.cfg.env_runners_cfg.sampling.max_tokens,
                                 score=lambda rows: self.learner_group.compute_logprobs(rows)[0],
                                 values=self.critic_values())
        inputs.rewards = shape_rewards(inputs)
        return ADVANTAGES.get(train.advantage_estimator)(inputs)

    def critic_values(self):
        """The critic's `compute_values(rows)`, for the "gae" estimator; None without a critic (PPO has one)."""
        return None

    def _train_minibatches(self, rows: list[TrainRow], trajectories: list[Trajectory],
                           group: LearnerGroup | None = None) -> dict[str, float]:
        """training.num_minibatches optimizer steps of `group` (the policy by default), each on the rows of a
        contiguous share of the trajectories.

        Counts (tokens, rows, micro-batches, passes) and the learners' seconds (step_s) are summed over the steps;
        every other metric is their mean; optimizer_steps says how many steps were taken."""
        train = self.cfg.training_cfg
        group = group or self.learner_group
        owner = np.array([row["trajectory"] for row in rows])
        steps = []
        for share in np.array_split(np.arange(len(trajectories)), min(train.num_minibatches, len(trajectories))):
            picked = np.flatnonzero(np.isin(owner, share))
            steps.append(group.train_step([rows[i] for i in picked], train.loss,
                                          max_tokens=self.cfg.env_runners_cfg.sampling.max_tokens))
        counts = ("tokens", "rows", "micro_batches", "forward_passes", "step_s")
        merged = {k: float(np.sum([s[k] for s in steps]) if k in counts else np.mean([s[k] for s in steps]))
                  for k in steps[0]}
        return {**merged, "optimizer_steps": float(len(steps))}

    def sync_weights(self) -> dict[str, float]:
        """Broadcast the learner's weights to every engine as the next version."""
        self.weight_version += 1
        return self._broadcast_weights()

    def _broadcast_weights(self) -> dict[str, float]:
        """Send the learner's weights to every engine under the current version. When batches are sampled ahead
        (and not across versions), learner rank 0 keeps a copy: an engine replaced while such a batch is sampled
        gets those weights again (`_resend_kept_weights`), though the learners have trained on meanwhile."""
        train = self.cfg.training_cfg
        keep = train.max_staleness > 0 and not train.partial_rollouts
        bucket = self.cfg.learners_cfg.weight_sync_bucket_bytes
        learner_refs = self.learner_group.broadcast_weights(self.weight_version, bucket, wait=False, keep=keep)
        return self._send_weights(learner_refs, f"broadcasting weight version {self.weight_version} to "
                                                f"{len(self.engines)} engines")

    def _resend_kept_weights(self) -> None:
        """Send every engine the weights of the last broadcast again (the version the batches sampled ahead were
        meant for); nothing before the first, when every engine holds the checkpoint's weights already."""
        if self.weight_version > 0:
            self._send_weights(self.learner_group.resend_kept_weights(wait=False),
                               f"sending weight version {self.weight_version} again to {len(self.engines)} engines")

    def _send_weights(self, learner_refs: list, what: str) -> dict[str, float]:
        """Have every engine receive what `learner_refs` (learner rank 0 first) send under the current version."""
        bucket = self.cfg.learners_cfg.weight_sync_bucket_bytes
        engine_refs = [e.receive_weights.remote(self._weight_metas, self.weight_version, bucket) for e in self.engines]
        limit = self.cfg.fault_tolerance_cfg.weight_sync_timeout_s
        try:
            sent = self.learner_group.wait(learner_refs, what, limit, "fault_tolerance.weight_sync_timeout_s")[0]
            get(engine_refs, limit, what, "fault_tolerance.weight_sync_timeout_s")
        except (RayTaskError, RayActorError, TimeoutError) as exc:
            if not self._broken_engines():
                raise
            # Learner rank 0 stopped sending while the other ranks gather the next bucket: the learners' own
            # collectives are broken too, so this is recovered as a learner failure (engines replaced on the way).
            raise LearnerFailed(f"an inference engine died or stalled while {what}: {exc}") from None
        return {"version": float(self.weight_version), "bytes": float(sent["bytes"]), "seconds": float(sent["seconds"])}

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, num_tasks: int | None = None, env_config: dict | None = None) -> dict[str, float]:
        """Greedy (by default) rollouts on held-out tasks; mean reward and its 95% interval, plus env figures."""
        return eval_summary(self.heldout_trajectories(num_tasks, env_config))

    def heldout_trajectories(self, num_tasks: int | None = None, env_config: dict | None = None) -> list[Trajectory]:
        """The trajectories behind `evaluate`, in task order: the same tasks at every call, so two calls pair up."""
        ev = self.cfg.evaluation_cfg
        n = num_tasks or ev.evaluation_num_tasks
        spec = self._runner_spec({**ev.evaluation_env_config, **(env_config or {})}, ev.evaluation_temperature,
                                 ev.evaluation_num_envs_per_env_runner)
        if self._eval_group is None:
            self._eval_group = self._heldout_group(spec)
        elif spec != self._eval_group.spec:  # other env settings: the same runner processes take them
            self._eval_group.configure(spec)
        trajectories = sample_heldout(self._eval_group, n, self.seed, self.sample)
        # The engines' generation time is what training iterations report; evaluation's is not theirs.
        if self._engine_seconds()[1]:
            self._broadcast_weights()
        return trajectories

    def _engine_seconds(self) -> tuple[list[float], bool]:
        """Each engine's generation seconds since the last call (and resets them), and whether an engine was found
        dead or stalled on the way: it died after its last call (while the learners trained, say), counts 0 s and
        is replaced and joined to the weight sync, so the broadcast the caller sends next reaches it."""
        limit = self.cfg.fault_tolerance_cfg.engine_call_timeout_s
        refs = [e.pop_generate_seconds.remote() for e in self.engines]
        seconds, lost = [], None
        for i, ref in enumerate(refs):
            try:
                seconds.append(float(get(ref, limit, f"reading inference engine {i}'s generation time",
                                         "fault_tolerance.engine_call_timeout_s")))
            except (RayActorError, TimeoutError) as exc:
                seconds.append(0.0)
                lost = lost or EngineFailed(f"inference engine {i} failed between calls: {exc}")
        if lost is not None:
            self._replace_engines_for_sync(lost)
        return seconds, lost is not None

    # -- checkpoints ---------------------------------------------------------------------
    def save_files(self, checkpoint_dir: str) -> None:
        """The batches sampled ahead, which the restored run trains on as the uninterrupted one would."""
        save_batches(self._prefetched.values(), checkpoint_dir)

    def load_files(self, checkpoint_dir: str) -> None:
        self._prefetched = load_batches(checkpoint_dir)

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides the learners' weights and optimizer (JSON): the weight version and the
        episode counters (the algorithm's and its training runners')."""
        return {"weight_version": self.weight_version, "counters": self.counters,
                "runner_counters": self.env_runner_group.counters}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take back `checkpoint_state`'s figures once the learners are restored."""
        self.counters.update(state["counters"])
        self.env_runner_group.counters.update(state.get("runner_counters", {}))
        self.weight_version = state["weight_version"] - 1
        self.sync_weights()  # engines get the restored weights under the saved version

    def cleanup(self) -> None:
        for group in (self.env_runner_group, self._eval_group):
            if group is not None:
                group.shutdown()
        for engine in self.engines:
            stop_engine(engine)
        super().cleanup()
        if self._wandb is not None:
            self._wandb.finish()


class AllEpisodesFailed(RuntimeError):
    """Every episode of an iteration failed (fault_tolerance.failed_iterations_to_stop in a row): nothing to train."""


def _flatten(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)):
            out[f"{prefix}{k}"] = v
    return out
