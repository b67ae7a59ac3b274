"""SFT: supervised fine-tuning on scripted-expert episodes, the warm-start every RL example starts from.

    config = (SFTConfig()
              .environment("memrl/Echo-v0")
              .env_runners(workflow="last_observation")
              .learners(model_path="runs/tiny-model", num_learners=2)
              .training(lr=1e-3, batch_size=64, steps=1000, steps_per_iteration=100))
    algo = config.build()
    while not (result := algo.train())["done"]: ...
    algo.save_model("runs/echo-sft")

`run(config, out)` does all of that and writes sft_summary.json beside the model (the command line: `memrl sft`).

An env that supports warm-starts implements `expert_action() -> str` on its unwrapped instance, a workflow
`expert_response(action) -> str`; the expert episodes run through the episode loop (memrl.rollout), and each call
becomes one training row holding the workflow's exact prompt ids. Each iteration takes `steps_per_iteration`
optimizer steps on rows drawn at random, then evaluates on held-out expert episodes: the learners' per-token NLL,
per-call exact match and the greedy return of whole episodes (an in-process TorchEngine holding the learners'
weights). Held-out episodes run on env_config updated with evaluation.evaluation_env_config (another split, say).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from tqdm import tqdm

from memrl.algorithms.trainer import Trainer
from memrl.checkpoints import portable
from memrl.config import NOT_SET, AlgorithmConfig, TrainingConfig, builder, given
from memrl.engines.base import GenerationOutput, InferenceEngine, SamplingConfig
from memrl.episode import Trajectory
from memrl.learner.learner_config import OptimizerConfig
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig
from memrl.learner.rows import TrainRow
from memrl.plugins import make_env
from memrl.rollout import BatchingResponder, ExpertResponder, Task, run_episode, run_sync
from memrl.stats import reward_interval
from memrl.workflows import workflow_class

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class SFTTrainingConfig(TrainingConfig):
    """TrainingConfig's optimizer settings (lr, weight_decay, betas, eps, grad_clip) plus the SFT run; the RL
    settings (groups, clipping, advantages) do not apply."""

    batch_size: int = 64
    """Rows (LLM calls) per optimizer step, drawn at random from the training rows."""
    steps: int = 1000
    """Optimizer steps of the whole run; the iteration that reaches them reports done=True."""
    steps_per_iteration: int = 100
    """Optimizer steps per train() call; each call ends with a held-out evaluation."""
    num_train_tasks: int = 1000
    """Expert episodes (env seeds seed .. seed + num_train_tasks - 1) whose calls are the training rows; held-out
    episodes take the next evaluation.evaluation_num_tasks seeds."""
    task_options: list[dict] = field(default_factory=list)
    """Reset options of the expert episodes, taken in turn by env seed (seed s gets task_options[s % len]); empty:
    none. E.g. [{"num_objectives": 1, "max_turns": 4}, {"num_objectives": 4, "max_turns": 10}] on memrl/Search-v0
    mixes task sizes in one warm-start."""
    probe_rows: bool = False
    """Also train on each expert episode's last memory probe (the workflow's `probes`, MemPO's: the questions, the
    memory the expert answered from and a request for the answers, then the gold answers), so the policy has read the
    context its memories are scored in before RL scores them. Needs a workflow whose probes give "memory" and
    "answer" (mempo); held-out probe rows are scored as `probe_nll`."""


class SFTConfig(AlgorithmConfig):
    """SFT defaults: lr 1e-3 (constant unless training.lr_schedule says otherwise), the SFT loss (mean NLL of the
    expert's tokens), 4096-token micro-batches."""

    def __init__(self):
        super().__init__()
        self.environment_cfg.env = "memrl/Echo-v0"
        self.learners_cfg.token_budget = 4096
        self.training_cfg = SFTTrainingConfig(optimizer=OptimizerConfig(lr=1e-3), loss=LossConfig(kind="sft"))

    @builder
    def training(self, *, batch_size: int = NOT_SET, steps: int = NOT_SET, steps_per_iteration: int = NOT_SET,
                 num_train_tasks: int = NOT_SET, task_options: list[dict] = NOT_SET, probe_rows: bool = NOT_SET,
                 **common) -> Self:
        """Set the SFT run's settings and, through AlgorithmConfig.training, the optimizer's (lr, ...)."""
        super().training(**common)
        return self._set("training", **given(locals()))

    def validate(self) -> None:
        super().validate()
        train = self.training_cfg
        for name in ("batch_size", "steps", "steps_per_iteration", "num_train_tasks"):
            value = getattr(train, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"training.{name}={value!r} is not allowed; it must be an integer >= 1")
        if not isinstance(train.task_options, list) or not all(isinstance(o, dict) for o in train.task_options):
            raise ValueError(f"training.task_options={train.task_options!r} is not allowed; it must be a list of "
                             "dicts (reset options)")
        if not isinstance(train.probe_rows, bool):
            raise ValueError(f"training.probe_rows={train.probe_rows!r} is not allowed; it must be True or False")
        if train.loss.kind != "sft":
            raise ValueError(f"training.kind={train.loss.kind!r} is not allowed for SFT; it trains with kind='sft'")
        seed = self.debugging_cfg.seed
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"debugging.seed={seed!r} is not allowed; SFT's env seeds count up from it (an integer "
                             ">= 0)")

    def actor_groups(self) -> list[tuple[str, int, int, float, str]]:
        """The learners and the side services: evaluation runs a TorchEngine in the trainer's own process."""
        return [group for group in super().actor_groups() if group[0] == "learners" or group[0].startswith("service ")]


class SFT(Trainer):
    """Supervised warm-start on expert rows, on the same DeepSpeed learners as RL."""

    @classmethod
    def get_default_config(cls) -> SFTConfig:
        return SFTConfig()

    def build(self) -> None:
        """The expert's training and held-out rows, the learners, and a torch engine in this process for the greedy
        held-out episodes; then the first evaluation."""
        from memrl.engines.torch_engine import TorchEngine
        from memrl.tokenizer import new_tokenizer

        env, run, learn, train = (self.cfg.environment_cfg, self.cfg.env_runners_cfg, self.cfg.learners_cfg,
                                  self.cfg.training_cfg)
        tokenizer = new_tokenizer(learn.model_path)
        self._task = dict(env_id=env.env, env_config=env.env_config, workflow=run.workflow,
                          workflow_config=run.workflow_config, tokenizer=tokenizer, max_calls=run.max_calls_per_episode,
                          task_options=train.task_options)
        episodes = expert_episodes(num_tasks=train.num_train_tasks, seed=self.seed, **self._task)
        rows = call_rows(episodes)
        eval_start = self.seed + train.num_train_tasks
        self.eval_seeds = range(eval_start, eval_start + self.cfg.evaluation_cfg.evaluation_num_tasks)
        # Held-out episodes take the evaluation's env overrides (say, another split of an env's tasks).
        self._eval_task = {**self._task, "env_config": {**env.env_config,
                                                        **self.cfg.evaluation_cfg.evaluation_env_config}}
        eval_episodes = expert_episodes(num_tasks=len(self.eval_seeds), seed=eval_start, **self._eval_task)
        self.eval_rows = call_rows(eval_episodes)
        # Greedy episodes may reply as long as the longest expert response; a longer reply is wrong anyway.
        self.max_tokens = max(len(r["response_ids"]) for r in rows + self.eval_rows)
        probes = probe_rows(episodes) if train.probe_rows else []
        if train.probe_rows and not probes:
            raise ValueError(f"training.probe_rows=True, but workflow {run.workflow!r} attached no memory probes "
                             "(\"memory\" and \"answer\") to the expert episodes; the mempo workflow does")
        rows += probes
        self.num_probe_rows = len(probes)
        self.eval_probe_rows = probe_rows(eval_episodes) if probes else []
        # The learner's train_step reads these; the SFT loss ignores them.
        self.train_rows = [{**r, "old_logprobs": np.zeros(len(r["response_ids"]), np.float32),
                            "advantages": np.zeros(len(r["response_ids"]), np.float32)} for r in rows]
        self.counters = {"learner_restarts": 0}
        self.start_learners()
        self.engine = TorchEngine(learn.model_path, seed=self.seed)
        self.rng = np.random.default_rng(self.seed)
        self.steps_done = 0
        self.train_nll: list[float] = []
        self.train_s = 0.0
        self.curve = [self.evaluate()]

    def _step(self, replay: bool = False) -> dict[str, Any]:
        train = self.cfg.training_cfg
        if self.steps_done >= train.steps:
            raise RuntimeError(f"this SFT run took all its training.steps={train.steps} already")
        t0 = time.perf_counter()
        nll, lrs = [], []
        for _ in range(min(train.steps_per_iteration, train.steps - self.steps_done)):
            picks = self.rng.choice(len(self.train_rows), size=train.batch_size,
                                    replace=len(self.train_rows) < train.batch_size)
            metrics = self.learner_group.train_step([self.train_rows[i] for i in picks], train.loss)
            nll.append(metrics["nll"])
            lrs.append(metrics["lr"])
            self.steps_done += 1
        t_trained = time.perf_counter()
        self.train_s += t_trained - t0
        self.train_nll += nll
        self.engine.load_weights(self.learner_group.gather_state_dict().items(), version=self.steps_done)
        self.curve.append(self.evaluate())
        return {"steps": self.steps_done, "done": self.steps_done >= train.steps,
                "learners": {"nll": float(np.mean(nll)), "optimizer_steps": float(len(nll)),
                             "lr": float(np.mean(lrs))},
                "evaluation": self.curve[-1], "reward_mean": self.curve[-1]["reward_mean"],
                "counters": dict(self.counters),
                "timers": {"train_s": t_trained - t0, "eval_s": time.perf_counter() - t_trained}}

    def evaluate(self) -> dict[str, float]:
        """Held-out NLL per token (learners' forward), per-call exact match and the mean greedy return with its 95%
        interval (the engine, holding the weights of the last iteration); with probe rows, their held-out NLL."""
        eos = self._task["tokenizer"].eos_token_id
        returns = greedy_rewards(self.engine, seeds=self.eval_seeds, max_tokens=self.max_tokens, **self._eval_task)
        reward, low, high = reward_interval(returns)
        figures = {"step": self.steps_done, "eval_nll": heldout_nll(self.learner_group, self.eval_rows),
                   "call_exact_match": call_exact_match(self.engine, self.eval_rows, eos),
                   "reward_mean": reward, "reward_ci_low": low, "reward_ci_high": high}
        if self.eval_probe_rows:
            figures["probe_nll"] = heldout_nll(self.learner_group, self.eval_probe_rows)
        return figures

    def summary(self) -> dict[str, Any]:
        """The run so far: its config, the evaluation curve (initial, final), the training NLL per step, times."""
        return {"config": self.cfg.to_dict(), "num_train_rows": len(self.train_rows),
                "num_probe_rows": self.num_probe_rows, "num_eval_rows": len(self.eval_rows),
                "initial": self.curve[0], "final": self.curve[-1], "curve": self.curve, "train_nll": self.train_nll,
                "train_step_s": self.train_s}

    def checkpoint_state(self) -> dict[str, Any]:
        """Steps taken, the batch draws' RNG, the evaluation curve and the training NLL so far."""
        return {"steps_done": self.steps_done, "rng": self.rng.bit_generator.state, "curve": self.curve,
                "train_nll": self.train_nll, "train_s": self.train_s}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.steps_done, self.curve, self.train_nll = state["steps_done"], state["curve"], state["train_nll"]
        self.train_s = state["train_s"]
        self.rng.bit_generator.state = state["rng"]
        self.engine.load_weights(self.learner_group.gather_state_dict().items(), version=self.steps_done)

SFTConfig.algo_class = SFT


SUMMARY_FILE = "sft_summary.json"
"""Written next to the checkpoint: the run's config and out, evaluation curve, final figures and wall time."""


def run(config: SFTConfig, out: str | Path, keep_eval_checkpoints: bool = False) -> dict:
    """Build `config` (starting Ray if needed), train all its steps, write the checkpoint and SUMMARY_FILE to
    `out`; keep_eval_checkpoints also saves the weights of every evaluation to out/step_<N>. Returns the summary.

    A run that starts from a checkpoint an SFT run wrote carries that run's summary (and the ones it carried, oldest
    first) under "earlier_stages", so the summary states the whole training budget."""
    start = time.perf_counter()
    base = Path(config.learners_cfg.model_path) / SUMMARY_FILE
    earlier = json.loads(base.read_text()) if base.is_file() else None
    out = Path(out).absolute()  # learner actors do not share this process's working directory
    algo = config.build()
    try:
        bar = tqdm(total=config.training_cfg.steps, desc="sft", unit="step",
                   disable=not config.debugging_cfg.progress_bars)
        done = False
        while not done:
            result = algo.train()
            done = result["done"]
            bar.update(int(result["learners"]["optimizer_steps"]))
            ev = result["evaluation"]
            bar.set_postfix(nll=f"{result['learners']['nll']:.3f}", eval_nll=f"{ev['eval_nll']:.3f}",
                            exact=f"{ev['call_exact_match']:.2f}")
            if keep_eval_checkpoints and not done:
                algo.save_model(out / f"step_{result['steps']}")
        bar.close()
        algo.save_model(out)
        summary = {**algo.summary(), "out": str(out), "wall_s": time.perf_counter() - start}
        if earlier is not None:
            summary["earlier_stages"] = [*earlier.pop("earlier_stages", []), earlier]
    finally:
        algo.stop()
    (out / SUMMARY_FILE).write_text(json.dumps(portable(summary), indent=1))
    for name in ("initial", "final"):
        m = summary[name]
        print(f"{name} (step {m['step']}): held-out NLL {m['eval_nll']:.4f}, per-call exact match "
              f"{m['call_exact_match']:.3f}, greedy reward {m['reward_mean']:.3f} "
              f"[{m['reward_ci_low']:.3f}, {m['reward_ci_high']:.3f}]")
    print(f"wrote {out} in {summary['wall_s']:.0f} s")
    return summary


def collect_expert_rows(env_id: str, env_config: dict, workflow: str, workflow_config: dict,
                        tokenizer: PreTrainedTokenizerBase, num_tasks: int, seed: int, max_calls: int = 64,
                        task_options: Sequence[dict] = ()) -> list[TrainRow]:
    """Training rows of expert episodes on env seeds seed .. seed + num_tasks - 1: `call_rows(expert_episodes(...))`."""
    return call_rows(expert_episodes(env_id, env_config, workflow, workflow_config, tokenizer, num_tasks, seed,
                                     max_calls, task_options))


def expert_episodes(env_id: str, env_config: dict, workflow: str, workflow_config: dict,
                    tokenizer: PreTrainedTokenizerBase, num_tasks: int, seed: int, max_calls: int = 64,
                    task_options: Sequence[dict] = ()) -> list[Trajectory]:
    """Expert episodes on env seeds seed .. seed + num_tasks - 1 (reset with `episode_options(task_options, seed)`).

    The episodes run through the episode loop with the scripted expert (ExpertResponder) in place of the model, so
    prompt ids are the workflow's own and each response is the tokenized expert response plus the EOS stop token.
    `max_calls` caps an episode as the env runners do.
    """
    env = make_env(env_id, env_config)
    workflow_cls = workflow_class(workflow)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id; expert responses end with the EOS stop token")

    async def expert_episode(task: Task) -> Trajectory:
        wf = workflow_cls(tokenizer, **workflow_config)
        expert = ExpertResponder(env, wf, eos)
        return await run_episode(env, wf, task, expert, max_calls=max_calls, check_action=expert.check_action)

    episodes = [run_sync(expert_episode(task)) for task in _tasks(range(seed, seed + num_tasks), task_options)]
    env.close()
    return episodes


def call_rows(episodes: Sequence[Trajectory]) -> list[TrainRow]:
    """One row per LLM call of the episodes: the call's prompt and response ids, loss_mask all ones."""
    return [TrainRow(prompt_ids=c.prompt_ids.astype(np.int64), response_ids=c.response_ids.astype(np.int64),
                     loss_mask=c.loss_mask)
            for episode in episodes for c in episode.conversations]


def probe_rows(episodes: Sequence[Trajectory]) -> list[TrainRow]:
    """One row per episode that has a memory probe: the last call's "memory" probe context (the memory the expert
    answered from) and its "answer" tokens, the sequence MemPO scores memories by. Earlier memories are left out: they
    may not hold every answer yet, and a row would teach the policy to answer beyond its memory."""
    rows = []
    for episode in episodes:
        probed = [c.probes for c in episode.conversations if {"memory", "answer"} <= c.probes.keys()]
        if probed:
            answer = probed[-1]["answer"].astype(np.int64)
            rows.append(TrainRow(prompt_ids=probed[-1]["memory"].astype(np.int64), response_ids=answer,
                                 loss_mask=np.ones(len(answer), np.int8)))
    return rows


def episode_options(task_options: Sequence[dict], seed: int) -> dict | None:
    """The reset options of the episode on env seed `seed`: task_options taken in turn, None when there are none."""
    return dict(task_options[seed % len(task_options)]) if task_options else None


def _tasks(seeds: Iterable[int], task_options: Sequence[dict]) -> list[Task]:
    """One task per env seed, reset with `episode_options`."""
    return [Task(seed=s, group_id=str(s), traj_id=str(s), options=episode_options(task_options, s) or {})
            for s in seeds]


def heldout_nll(group: LearnerGroup, rows: Sequence[TrainRow]) -> float:
    """Mean negative log-likelihood per response token of `rows` under the learners' current weights."""
    logprobs, _ = group.compute_logprobs(rows)
    return -float(sum(lp.sum() for lp in logprobs)) / sum(len(lp) for lp in logprobs)


def call_exact_match(engine: InferenceEngine, rows: Sequence[TrainRow], eos: int) -> float:
    """Share of rows whose greedy reply to the row's prompt is exactly the expert's response ids (EOS included)."""
    sampling = SamplingConfig(max_tokens=max(len(r["response_ids"]) for r in rows), temperature=0.0,
                              stop_token_ids=[eos])
    outputs = engine.generate([r["prompt_ids"].tolist() for r in rows], sampling)
    return float(np.mean([out.token_ids == r["response_ids"].tolist() for out, r in zip(outputs, rows)]))


def greedy_rewards(engine: InferenceEngine, env_id: str, env_config: dict, workflow: str, workflow_config: dict,
                   tokenizer: PreTrainedTokenizerBase, seeds: Iterable[int], max_tokens: int, max_calls: int = 64,
                   task_options: Sequence[dict] = ()) -> list[float]:
    """Return of one greedy episode per env seed (reset as collect_expert_rows does), all episodes run at once
    through the episode loop so that their calls reach `engine` (in this process) as one batch per round."""
    workflow_cls = workflow_class(workflow)
    sampling = SamplingConfig(max_tokens=max_tokens, temperature=0.0, stop_token_ids=[tokenizer.eos_token_id])

    async def generate_batch(prompts: list[list[int]]) -> list[GenerationOutput]:
        return engine.generate(prompts, sampling)

    async def run_all(tasks: list[Task]) -> list[Trajectory]:
        respond = BatchingResponder(generate_batch)
        envs = [make_env(env_id, env_config) for _ in tasks]
        unfinished = len(tasks)
        if any(env.metadata.get("blocking_io") for env in envs):  # steps end in the server's order: rounds
            respond.rounds = lambda: unfinished

        async def one(position: int, task: Task, env) -> Trajectory:
            nonlocal unfinished
            try:
                return await run_episode(env, workflow_cls(tokenizer, **workflow_config), task,
                                         functools.partial(respond, key=position), max_calls=max_calls,
                                         max_model_len=engine.max_model_len())
            finally:
                env.close()
                unfinished -= 1
                if respond.rounds is not None:
                    respond.check()

        return await asyncio.gather(*(one(i, t, env) for i, (t, env) in enumerate(zip(tasks, envs))))

    return [t.reward for t in run_sync(run_all(_tasks(seeds, task_options)))]
