"""SFT warm-start: supervised fine-tuning on scripted-expert trajectories, on the same DeepSpeed learners as RL.

    python -m memrl.sft --env memrl/Echo-v0 --workflow last_observation --model runs/tiny-model \\
        --out runs/echo-sft --steps 1000

An env that supports warm-starts implements `expert_action() -> str` on its unwrapped instance (the right action
in the current state); a workflow implements `expert_response(action) -> str` (the reply its own `on_response`
parses back to that action). Each expert call becomes one training row holding the workflow's exact prompt ids.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import inspect
import json
import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
from tqdm import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from memrl.cluster import ensure_ray
from memrl.engines.base import GenerationOutput, InferenceEngine, SamplingConfig
from memrl.engines.torch_engine import TorchEngine
from memrl.episode import Trajectory
from memrl.learner.learner import LearnerConfig
from memrl.learner.learner_group import LearnerGroup
from memrl.learner.losses import LossConfig
from memrl.rollout import BatchingResponder, ExpertResponder, Task, run_episode
from memrl.stats import reward_interval
from memrl.workflows import workflow_class

SUMMARY_FILE = "sft_summary.json"
"""Written into SFTConfig.out next to the checkpoint: config, evaluation curve, final metrics, wall time."""


@dataclass(kw_only=True)
class SFTConfig:
    """One warm-start run: which expert data, which starting model, how long to train and where to write."""

    env: str = "memrl/Echo-v0"
    """Registered gymnasium id whose unwrapped env implements expert_action()."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments for gymnasium.make (a JSON object on the command line)."""
    workflow: str = "last_observation"
    """Registered workflow name (memrl.workflows.WORKFLOWS) that implements expert_response(action)."""
    workflow_config: dict = field(default_factory=dict)
    """Keyword arguments for the workflow (a JSON object on the command line)."""
    task_options: list[dict] = field(default_factory=list)
    """Reset options of the episodes, taken in turn by env seed (seed s gets task_options[s % len]); empty: none.
    E.g. [{"num_objectives": 1, "max_turns": 4}, {"num_objectives": 4, "max_turns": 10}] on memrl/Search-v0 mixes
    task sizes in one warm-start (a JSON list of objects on the command line)."""
    model_path: str
    """Local Hugging Face checkpoint to start from (e.g. the embedded tiny model)."""
    out: str
    """Directory to write the warm-started Hugging Face checkpoint and sft_summary.json to."""
    num_train_tasks: int = 1000
    """Expert episodes (env seeds seed .. seed + num_train_tasks - 1) whose calls are the training rows."""
    num_eval_tasks: int = 64
    """Held-out expert episodes, on the next num_eval_tasks seeds (disjoint from the training seeds)."""
    batch_size: int = 64
    """Rows (LLM calls) per optimizer step, drawn at random from the training rows."""
    steps: int = 1000
    """Optimizer steps."""
    lr: float = 1e-3
    """AdamW learning rate (constant)."""
    num_learners: int = 1
    """DeepSpeed ZeRO-3 learner actors (data-parallel ranks)."""
    token_budget: int = 4096
    """Most padded tokens (rows x longest row) in one forward pass of a learner."""
    seed: int = 0
    """Seeds the env tasks, the batch draws, the learners and the evaluation engine."""
    eval_every: int = 100
    """Evaluate every this many steps (and before the first and after the last)."""
    keep_eval_checkpoints: bool = False
    """Also save the weights of every evaluation as a checkpoint in out/step_<N> (to pick a training length)."""

    def __post_init__(self) -> None:
        for name in ("num_train_tasks", "num_eval_tasks", "batch_size", "steps", "num_learners", "token_budget",
                     "eval_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SFTConfig.{name}={value!r} is not allowed; it must be an integer >= 1")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"SFTConfig.seed={self.seed!r} is not allowed; it must be an integer >= 0")
        if not self.lr > 0:
            raise ValueError(f"SFTConfig.lr={self.lr!r} is not allowed; it must be > 0")
        for name in ("env_config", "workflow_config"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"SFTConfig.{name} must be a dict of keyword arguments, got {getattr(self, name)!r}")
        if not isinstance(self.task_options, list) or not all(isinstance(o, dict) for o in self.task_options):
            raise ValueError("SFTConfig.task_options must be a list of dicts (reset options), got "
                             f"{self.task_options!r}")
        if not Path(self.model_path).is_dir():
            raise ValueError(f"SFTConfig.model_path {self.model_path!r} is not a local checkpoint directory")
        if not self.out:
            raise ValueError("SFTConfig.out must name the directory to write the checkpoint to")


def collect_expert_rows(
    env_id: str,
    env_config: dict,
    workflow: str,
    workflow_config: dict,
    tokenizer: PreTrainedTokenizerBase,
    num_tasks: int,
    seed: int,
    max_calls: int = 64,
    task_options: Sequence[dict] = (),
) -> list[dict[str, np.ndarray]]:
    """Training rows of expert episodes on env seeds seed .. seed + num_tasks - 1 (reset with
    `episode_options(task_options, seed)`), one row per LLM call.

    The episodes run through the env runners' loop (memrl.rollout.run_episode) with the scripted expert
    (ExpertResponder) in place of the model: prompt_ids are the workflow's own ids, response_ids the tokenized
    expert response plus the EOS stop token, loss_mask all ones. `max_calls` caps an episode as the runners do.
    """
    import envs  # noqa: F401  (registers the memrl/ gymnasium ids in this process)

    env = gym.make(env_id, **env_config)
    workflow_cls = workflow_class(workflow)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id; expert responses end with the EOS stop token")

    async def expert_episode(task: Task) -> Trajectory:
        wf = workflow_cls(tokenizer, **workflow_config)
        expert = ExpertResponder(env, wf, eos)
        return await run_episode(env, wf, task, expert, max_calls=max_calls, check_action=expert.check_action)

    rows = []
    for task in _tasks(range(seed, seed + num_tasks), task_options):
        for c in asyncio.run(expert_episode(task)).conversations:
            rows.append({"prompt_ids": c.prompt_ids.astype(np.int64), "response_ids": c.response_ids.astype(np.int64),
                         "loss_mask": c.loss_mask})
    env.close()
    return rows


def episode_options(task_options: Sequence[dict], seed: int) -> dict | None:
    """The reset options of the episode on env seed `seed`: task_options taken in turn, None when there are none."""
    return dict(task_options[seed % len(task_options)]) if task_options else None


def _tasks(seeds: Iterable[int], task_options: Sequence[dict]) -> list[Task]:
    """One task per env seed, reset with `episode_options`."""
    return [Task(seed=s, group_id=str(s), traj_id=str(s), options=episode_options(task_options, s) or {})
            for s in seeds]


def heldout_nll(group: LearnerGroup, rows: Sequence[dict[str, np.ndarray]]) -> float:
    """Mean negative log-likelihood per response token of `rows` under the learners' current weights."""
    logprobs, _ = group.compute_logprobs(rows)
    return -float(sum(lp.sum() for lp in logprobs)) / sum(len(lp) for lp in logprobs)


def call_exact_match(engine: InferenceEngine, rows: Sequence[dict[str, np.ndarray]], eos: int) -> float:
    """Share of rows whose greedy reply to the row's prompt is exactly the expert's response ids (EOS included)."""
    sampling = SamplingConfig(
        max_tokens=max(len(r["response_ids"]) for r in rows), temperature=0.0, stop_token_ids=[eos]
    )
    outputs = engine.generate([r["prompt_ids"].tolist() for r in rows], sampling)
    return float(np.mean([out.token_ids == r["response_ids"].tolist() for out, r in zip(outputs, rows)]))


def greedy_rewards(
    engine: InferenceEngine,
    env_id: str,
    env_config: dict,
    workflow: str,
    workflow_config: dict,
    tokenizer: PreTrainedTokenizerBase,
    seeds: Iterable[int],
    max_tokens: int,
    max_calls: int = 64,
    task_options: Sequence[dict] = (),
) -> list[float]:
    """Return of one greedy episode per env seed (reset as collect_expert_rows does), all episodes run at once
    through the episode loop so that their calls reach `engine` (in this process) as one batch per round."""
    import envs  # noqa: F401  (registers the memrl/ gymnasium ids in this process)

    workflow_cls = workflow_class(workflow)
    sampling = SamplingConfig(max_tokens=max_tokens, temperature=0.0, stop_token_ids=[tokenizer.eos_token_id])

    async def generate_batch(prompts: list[list[int]]) -> list[GenerationOutput]:
        return engine.generate(prompts, sampling)

    async def run_all(tasks: list[Task]) -> list[Trajectory]:
        respond = BatchingResponder(generate_batch)

        async def one(task: Task) -> Trajectory:
            env = gym.make(env_id, **env_config)
            try:
                return await run_episode(env, workflow_cls(tokenizer, **workflow_config), task, respond,
                                         max_calls=max_calls, max_model_len=engine.max_model_len())
            finally:
                env.close()

        return await asyncio.gather(*(one(t) for t in tasks))

    return [t.reward for t in asyncio.run(run_all(_tasks(seeds, task_options)))]


def train_sft(config: SFTConfig) -> dict:
    """Warm-start `config.model_path` on expert rows; write the checkpoint and sft_summary.json to `config.out`.

    Needs a running Ray instance. Each evaluation reports the held-out per-token NLL (learners' forward),
    per-call exact match (greedy reply to the expert's held-out prompts equals the expert's response) and the
    mean env return of greedy episodes on the held-out seeds with its 95% interval; the last two come from a
    TorchEngine in this process that receives the learners' gathered weights. Returns the summary.
    """
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    task = (config.env, config.env_config, config.workflow, config.workflow_config, tokenizer)
    options = {"task_options": config.task_options}
    train_rows = collect_expert_rows(*task, config.num_train_tasks, config.seed, **options)
    eval_start = config.seed + config.num_train_tasks
    eval_seeds = range(eval_start, eval_start + config.num_eval_tasks)
    eval_rows = collect_expert_rows(*task, config.num_eval_tasks, eval_start, **options)
    # Greedy episodes may reply as long as the longest expert response; a longer reply is wrong anyway.
    max_tokens = max(len(r["response_ids"]) for r in train_rows + eval_rows)
    # The learner's train_step reads these; the SFT loss ignores them.
    train_rows = [
        {**r, "old_logprobs": np.zeros(len(r["response_ids"]), np.float32),
         "advantages": np.zeros(len(r["response_ids"]), np.float32)}
        for r in train_rows
    ]

    learner_config = LearnerConfig(model_path=config.model_path, lr=config.lr, token_budget=config.token_budget,
                                   seed=config.seed, compute_ref=False)
    group = LearnerGroup(learner_config, num_learners=config.num_learners)
    engine = TorchEngine(config.model_path, seed=config.seed)
    loss_config = LossConfig(kind="sft")
    rng = np.random.default_rng(config.seed)

    def evaluate(step: int) -> dict[str, float]:
        if step:
            engine.load_weights(group.gather_state_dict().items(), version=step)
        reward, low, high = reward_interval(greedy_rewards(engine, *task, eval_seeds, max_tokens, **options))
        return {"step": step, "eval_nll": heldout_nll(group, eval_rows),
                "call_exact_match": call_exact_match(engine, eval_rows, tokenizer.eos_token_id),
                "reward_mean": reward, "reward_ci_low": low, "reward_ci_high": high}

    train_nll: list[float] = []
    train_s = 0.0
    try:
        curve = [evaluate(0)]
        bar = tqdm(range(1, config.steps + 1), desc="sft", unit="step")
        for step in bar:
            picks = rng.choice(len(train_rows), size=config.batch_size, replace=len(train_rows) < config.batch_size)
            t0 = time.perf_counter()
            metrics = group.train_step([train_rows[i] for i in picks], loss_config)
            train_s += time.perf_counter() - t0
            train_nll.append(metrics["nll"])
            if step % config.eval_every == 0 or step == config.steps:
                curve.append(evaluate(step))
                if config.keep_eval_checkpoints and step < config.steps:
                    group.save_hf(str(Path(config.out) / f"step_{step}"))
            bar.set_postfix(nll=f"{metrics['nll']:.3f}", eval_nll=f"{curve[-1]['eval_nll']:.3f}",
                            exact=f"{curve[-1]['call_exact_match']:.2f}")
        Path(config.out).mkdir(parents=True, exist_ok=True)
        group.save_hf(config.out)
    finally:
        group.shutdown()

    summary = {
        "config": dataclasses.asdict(config),
        "num_train_rows": len(train_rows),
        "num_eval_rows": len(eval_rows),
        "initial": curve[0],
        "final": curve[-1],
        "curve": curve,
        "train_nll": train_nll,
        "train_step_s": train_s,
        "wall_s": time.perf_counter() - start,
    }
    (Path(config.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    return summary


def _field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string literal under it), for --help."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {
        a.target.id: b.value.value
        for a, b in zip(body, body[1:])
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
    }


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} must be a JSON object of keyword arguments")
    return value


def _json_object_list(text: str) -> list[dict]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a JSON list of objects")
    return value


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false")
    return text.lower() in ("true", "1")


def parse_args(argv: Sequence[str] | None = None) -> SFTConfig:
    """SFTConfig from command-line flags: one per field (--env-config as a JSON object; --model for model_path)."""
    parser = argparse.ArgumentParser(description="SFT warm-start on scripted-expert trajectories.")
    docs = _field_docs(SFTConfig)
    types = {"str": str, "int": int, "float": float, "dict": _json_object, "list[dict]": _json_object_list,
             "bool": _boolean}
    for f in dataclasses.fields(SFTConfig):
        flags = [f"--{f.name.replace('_', '-')}"] + (["--model"] if f.name == "model_path" else [])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        parser.add_argument(*flags, dest=f.name, type=types[f.type], required=required,
                            default=argparse.SUPPRESS, help=docs.get(f.name, ""))
    try:
        return SFTConfig(**vars(parser.parse_args(argv)))
    except ValueError as exc:
        parser.error(str(exc))


def run(config: SFTConfig) -> dict:
    """Start (or join) Ray, train, print the before/after figures; returns the summary."""
    ensure_ray(config.num_learners)
    summary = train_sft(config)
    for name in ("initial", "final"):
        m = summary[name]
        print(f"{name} (step {m['step']}): held-out NLL {m['eval_nll']:.4f}, per-call exact match "
              f"{m['call_exact_match']:.3f}, greedy reward {m['reward_mean']:.3f} "
              f"[{m['reward_ci_low']:.3f}, {m['reward_ci_high']:.3f}]")
    print(f"wrote {config.out} in {summary['wall_s']:.0f} s")
    return summary


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry point: `run` with the flags' config."""
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
