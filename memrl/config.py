"""AlgorithmConfig: the RLlib-style builder every memrl algorithm is configured with.

    config = (DAPOConfig()
              .environment("memrl/Echo-v0", env_config={"num_turns": 2})
              .env_runners(num_env_runners=2, engine="vllm")
              .learners(num_learners=2, model_path="/ckpt")
              .training(lr=1e-5, group_size=8))
    algo = config.build()
    result = algo.train()

Each builder method sets the settings of one typed section, taken as keyword arguments; each setting is defined once,
in its section's dataclass. The sections the builder shares with the actors that use them live beside those actors
and are handed to them unchanged: LearnersConfig and OptimizerConfig (memrl.learner.learner_config), SamplingConfig
(memrl.engines.base), FaultToleranceConfig (memrl.cluster), LossConfig (memrl.learner.losses); the others are here.
`validate()` (called by `build()`) names the bad setting and what is allowed. `to_dict()` / `from_dict()` make the
config a Ray Tune param_space.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from ray.tune.tune import _Config

from memrl.cluster import FaultToleranceConfig
from memrl.engines import ENGINES
from memrl.engines.base import SamplingConfig
from memrl.learner.learner_config import LearnerConfig, LearnersConfig, OptimizerConfig
from memrl.learner.losses import LossConfig
from memrl.services import ServicesConfig


@dataclass
class EnvConfig:
    """Which environment to sample from."""

    env: str | None = None
    """Registered gymnasium id, e.g. "memrl/Echo-v0"."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments for gymnasium.make."""


@dataclass
class EnvRunnersConfig:
    """Rollout side: env runners, their workflow and the inference engines."""

    num_env_runners: int = 1
    """EnvRunner actors. 0: the runners run in the algorithm's own process, one per engine (as RLlib's
    num_env_runners=0): one process fewer to start and feed, and a debugger stops inside envs and workflows."""
    num_envs_per_env_runner: int = 8
    """Envs per runner: trajectories a runner has in flight at once."""
    workflow: str = "last_observation"
    """Context policy name (memrl.workflows.WORKFLOWS)."""
    workflow_config: dict = field(default_factory=dict)
    """Keyword arguments for the workflow."""
    max_calls_per_episode: int = 64
    """Safety cap on LLM calls per trajectory."""
    engine: str = "torch"
    """Inference engine: "vllm" (vLLM; CPU build here, CUDA build on GPUs) or "torch" (reference engine)."""
    num_engines: int = 1
    """Engine actors; runners share them round-robin. 0: one torch engine in the algorithm's own process
    (memrl.engines.local), with the runners there too (num_env_runners=0): no engine process to start, and a
    debugger stops inside the engine."""
    engine_config: dict = field(default_factory=dict)
    """Extra keyword arguments for the engine constructor (e.g. kv_cache_bytes for vLLM; without it a vLLM engine on
    GPUs sizes its KV cache from their memory)."""
    num_gpus_per_engine: float = 0.0
    """GPUs each engine actor reserves (0 on CPU machines): a share of one (engines beside learners on a GPU), or N
    whole GPUs over which a vLLM engine splits the model by tensor parallelism (tensor_parallel_size N)."""
    num_cpus_per_engine: int = 1
    """CPUs each engine actor reserves; Ray sets its OMP_NUM_THREADS to the same, so a CPU engine computes on as
    many threads. Raise it where the engine has cores to itself (e.g. synchronous training on a small machine)."""
    resources_per_engine: dict = field(default_factory=dict)
    """Ray custom resources each engine reserves, which places engines on the nodes that offer them: e.g.
    {"engine_node": 1} with those nodes started `ray start --resources='{"engine_node": 8}'`."""
    resources_per_env_runner: dict = field(default_factory=dict)
    """Ray custom resources each env runner reserves (runners reserve no CPU): e.g. {"head": 0.01} keeps them on
    a head node started with `--resources='{"head": 1}'`."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """How training rollouts sample each call (max_tokens, temperature, top_p, stop_token_ids; set through
    env_runners(max_tokens=...)), handed to every env runner unchanged."""
    continuous_batching: bool | None = None
    """Each engine serves the requests of all its runners from one running batch, each episode's request as soon
    as it is made and each reply as soon as it is done (memrl.engines.batcher), instead of one runner's batch at a
    time, each waiting for its longest reply. Faster where the engine has a GPU; which requests share a batch then
    depends on timing, so runs do not repeat exactly. None: on for engines on GPUs, off otherwise."""

    @property
    def batches_continuously(self) -> bool:
        """continuous_batching, with None resolved: on for engines that reserve GPUs."""
        if self.continuous_batching is None:
            return self.num_gpus_per_engine > 0
        return bool(self.continuous_batching)


@dataclass
class TrainingConfig:
    """The RL algorithm's settings."""

    tasks_per_iteration: int = 8
    """Distinct tasks (groups) sampled per iteration."""
    group_size: int = 8
    """Trajectories per task; advantages compare within a group."""
    num_minibatches: int = 1
    """Optimizer steps per iteration: the kept trajectories are split in order into this many mini-batches (PPO's
    mini-batch updates; the clip ratio keeps later steps near the sampling policy)."""
    norm_adv_by_std: bool = False
    """Divide group advantages by the group std (GRPO); False is DAPO / Dr.GRPO."""
    negative_advantage_weight: float = 1.0
    """Below-mean trajectories' advantages are multiplied by this, in [0, 1]: 1 is the unbiased estimator, 0 trains on
    the above-mean trajectories alone (rejection-sampling fine-tuning weighted by the advantage). A sharp policy's
    wrong samples are rare slips of low probability, whose push-down carries most of the gradient; a smaller weight
    leaves more of the update to the right samples that greedy decoding does not yet take."""
    advantage_estimator: str = "group"
    """The advantage estimator (memrl.learner.advantages.ADVANTAGES, or "module:function"): "group" gives every
    conversation its trajectory's group-relative advantage (the papers' outcome reward); "call_by_position" credits
    each call on its own reward (Conversation.reward, which the env gives per call in its final info's
    "row_rewards", as ChunkStream-v0 does with score_memories) against its group's calls at the same position; "call"
    against all of its group's calls (Mem-α); "gae" (PPO) and "mempo" (MemPO) are their methods' own."""
    reward_shapers: tuple[str, ...] = ("overlong", "kl_in_reward")
    """Terms added to each trajectory's reward before the advantages, in order (memrl.learner.advantages.
    REWARD_SHAPERS, or "module:function"); the built-in two do nothing unless overlong_buffer_tokens or
    loss.kl_in_reward asks for them."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal (DAPO dynamic sampling) and sample more to refill the batch."""
    dynamic_sampling_max_rounds: int = 3
    """With dynamic sampling: most sampling rounds per iteration spent refilling dropped groups."""
    dynamic_sampling_metric: str | None = None
    """With dynamic sampling: the trajectory metric whose spread keeps a group (an env figure such as Mem-α's
    "r_acc"; DAPO keeps groups whose accuracy differs, where small shaping terms would make every reward differ);
    None compares the rewards."""
    overlong_buffer_tokens: int = 0
    """DAPO overlong shaping: responses within this many tokens of max_tokens are penalised linearly (0 = off)."""
    overlong_penalty: float = 1.0
    """Penalty at max_tokens (and beyond) for overlong shaping, per conversation."""
    stitch_trajectories: bool = False
    """Train each trajectory as one token-tree row (memrl.learner.stitching): conversations share their identical
    prefixes, each token still sees exactly its rollout context. Saves learner compute where calls share a long
    prefix (the task prompt, or a whole history); False trains one row per conversation."""
    use_rollout_logprobs: bool = True
    """Use the engine's logprobs as the PPO old logprobs (one update per batch makes them equal up to numerics);
    False recomputes them on the learner."""
    tempered_logprobs: bool = False
    """Score every token under the distribution it was sampled from, logits / env_runners.temperature, so that training
    at a temperature other than 1 is exactly on-policy (the tempered policy is trained; greedy decoding is unchanged
    by it): the learners divide the logits by the temperature and the engines return the tempered logprobs, so the
    rollout logprobs can serve as the old ones. False scores the model's own distribution. Needs a temperature > 0
    and top_p 1 (neither side truncates the distribution)."""
    max_staleness: int = 0
    """Asynchronous training: with k >= 1 batches are sampled k iterations ahead, the one for iteration i + k while
    the learner trains iteration i, so every call is k weight versions behind the learner (runs stay reproducible and
    resume exactly); trajectories with a call more than k versions behind are not trained on (counted as
    trajectories_stale). 0 is the synchronous loop: sample, learn, broadcast. Learner rank 0 then keeps a host copy of
    the weights it last sent (one model's size), so an engine replaced while a batch is sampled ahead samples it
    under the weights it was meant for."""
    partial_rollouts: bool = False
    """With max_staleness >= 1: broadcast new weights as soon as the learner step ends, without waiting for the batch
    being sampled; its episodes' later calls run under the new weights, each call recording its version. Sampling
    never waits for the learner, but which calls get which weights depends on timing: not reproducible run to run."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """AdamW and its learning-rate schedule (lr, lr_schedule, ...; set through training(lr=...))."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Policy loss: clipping, KL, aggregation, entropy, off-policy correction (set through training(clip_low=...))."""


@dataclass
class EvaluationConfig:
    """Held-out evaluation."""

    evaluation_interval: int = 0
    """Evaluate every N iterations (0 = only when `evaluate()` is called)."""
    evaluation_num_tasks: int = 64
    """Held-out tasks per evaluation (seeds disjoint from training)."""
    evaluation_temperature: float = 0.0
    """Sampling temperature at evaluation (0 = greedy)."""
    evaluation_env_config: dict = field(default_factory=dict)
    """Overrides of env_config for evaluation (e.g. longer documents)."""
    evaluation_num_envs_per_env_runner: int | None = None
    """Episodes each env runner keeps in flight at evaluation; None uses env_runners.num_envs_per_env_runner. Greedy
    held-out runs of many tasks finish sooner with more in flight: the engine batches more calls per step."""
    evaluation_num_env_runners: int | None = None
    """Where held-out episodes run (RLlib's setting of this name). None: runner actors laid out as training's
    (env_runners.num_env_runners of them, or one per engine when that is 0). 0: the same layout in the algorithm's
    process, with no process to start; its trajectories are those of the runner actors. k: k runner actors over the
    engines, runner i asking engine i % num_engines."""


@dataclass
class DebuggingConfig:
    """Seeds, logging and start-up checks."""

    seed: int = 0
    """Seeds task order, sampling and model init; the same seed reproduces a run."""
    wandb_project: str | None = None
    """wandb project to log to (offline unless WANDB_API_KEY is set); None, or WANDB_MODE=disabled, disables wandb."""
    progress_bars: bool = True
    """Show a progress bar per phase (held-out evaluation before, training iterations, evaluation after) in the
    tuned examples' train loop (memrl.experiment.train)."""
    check_resources: bool = True
    """Before any actor starts, check that the Ray cluster holds the CPUs and GPUs the actors reserve and fail at
    once naming what is missing. Turn off on an autoscaling cluster (`ray up cluster.yaml`), whose nodes come only
    when actors ask for them."""
    check_services: bool = True
    """Before any actor starts, check that the services the env options name are there: a named Ray actor is
    running, a URL accepts a connection within SERVICE_PROBE_S (memrl.preflight). Turn off for a service that comes
    up after the run starts."""
    check_memory: bool = True
    """When the actors reserve GPUs, check before any starts that each learner's and engine's memory plan
    (memrl.memory_plan) fits its share of a GPU of gpu_memory_gb, and fail at once naming the figures and the
    settings to change."""
    gpu_memory_gb: float | None = None
    """Memory of each of the cluster's GPUs, in GB (an A100 40 or 80, an H100 80, an H200 141), for check_memory.
    None: that of this machine's first GPU when nvidia-smi reports one, else the memory is not checked."""


SECTIONS = {
    "environment": EnvConfig,
    "env_runners": EnvRunnersConfig,
    "learners": LearnersConfig,
    "training": TrainingConfig,
    "evaluation": EvaluationConfig,
    "debugging": DebuggingConfig,
    "fault_tolerance": FaultToleranceConfig,
    "services": ServicesConfig,
}


class _NotSet:
    """The default of every builder argument: the setting is left as it is."""

    def __repr__(self) -> str:
        return "NOT_SET"


NOT_SET: Any = _NotSet()
"""A builder argument not given (None can be a setting's value)."""


def given(arguments: dict[str, Any]) -> dict[str, Any]:
    """A builder method's locals() less `self`, the `common` settings it passes on, and what was not given."""
    return {k: v for k, v in arguments.items() if k not in ("self", "__class__", "common") and v is not NOT_SET}


def builder(method):
    """Make a builder method refuse a setting its section does not have with ValueError listing the ones it has
    (rather than Python's TypeError, which lists none). A config whose section has settings of its own overrides
    the section's method with them as keyword arguments and `**common`, which it passes to super():

        @builder
        def training(self, *, gamma: float = NOT_SET, **common) -> Self:
            super().training(**common)
            return self._set("training", **given(locals()))
    """

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        allowed = self.settings(method.__name__)
        if unknown := [key for key in kwargs if key not in allowed]:
            raise ValueError(f"{type(self).__name__}.{method.__name__}() has no setting {unknown[0]!r}; allowed: "
                             f"{sorted(allowed)}")
        return method(self, *args, **kwargs)

    return checked


def _checked(section: str, settings: Any) -> None:
    """Run a nested section's own checks (its __post_init__), naming a failing setting as the builder names it
    (env_runners.max_tokens, not SamplingConfig.max_tokens)."""
    try:
        dataclasses.replace(settings)
    except ValueError as exc:
        raise ValueError(str(exc).replace(f"{type(settings).__name__}.", f"{section}.")) from None


class AlgorithmConfig(_Config):
    """Builder for an Algorithm; subclasses set `algo_class` and their own defaults.

    Subclassing Tune's config base (as RLlib's AlgorithmConfig does) lets `tune.Tuner(param_space=config)`
    take the builder itself."""

    algo_class: type | None = None
    min_group_size: int = 1
    """Fewest trajectories per task the algorithm can learn from (group-relative advantages need two)."""
    has_critic: bool = False
    """Whether the algorithm trains a critic (PPO), whose values the "gae" advantage estimator needs."""

    def __init__(self):
        self.environment_cfg = EnvConfig()
        self.env_runners_cfg = EnvRunnersConfig()
        self.learners_cfg = LearnersConfig()
        self.training_cfg = TrainingConfig()
        self.evaluation_cfg = EvaluationConfig()
        self.debugging_cfg = DebuggingConfig()
        self.fault_tolerance_cfg = FaultToleranceConfig()
        self.services_cfg = ServicesConfig()

    # -- builder methods -------------------------------------------------------------
    # Each takes its section's settings as keyword arguments (NOT_SET: left as it is); a name the section does not
    # have is an error listing the ones it has. Nested sections (env_runners' sampling, training's optimizer and
    # loss) are set through their owner's method. tests/test_config.py checks that every signature lists exactly its
    # section's settings, so each setting is defined once, in its dataclass.
    @builder
    def environment(self, env: str | None = None, *, env_config: dict | None = None) -> Self:
        """Set the env id and its constructor arguments."""
        values = {"env": env, "env_config": env_config}
        return self._set("environment", **{k: v for k, v in values.items() if v is not None})

    @builder
    def env_runners(self, *, num_env_runners: int = NOT_SET, num_envs_per_env_runner: int = NOT_SET,
                    workflow: str = NOT_SET, workflow_config: dict = NOT_SET, max_calls_per_episode: int = NOT_SET,
                    engine: str = NOT_SET, num_engines: int = NOT_SET, engine_config: dict = NOT_SET,
                    num_gpus_per_engine: float = NOT_SET, num_cpus_per_engine: int = NOT_SET,
                    resources_per_engine: dict = NOT_SET, resources_per_env_runner: dict = NOT_SET,
                    max_tokens: int = NOT_SET, temperature: float = NOT_SET, top_p: float = NOT_SET,
                    stop_token_ids: list[int] = NOT_SET, continuous_batching: bool | None = NOT_SET) -> Self:
        """Set EnvRunnersConfig's settings and its sampling's (SamplingConfig: max_tokens, temperature, ...)."""
        return self._set("env_runners", **given(locals()))

    @builder
    def learners(self, *, model_path: str | None = NOT_SET, num_learners: int = NOT_SET,
                 num_gpus_per_learner: float = NOT_SET, num_cpus_per_learner: int = NOT_SET,
                 resources_per_learner: dict = NOT_SET, token_budget: int = NOT_SET, padding_free: bool = NOT_SET,
                 dtype: str = NOT_SET, zero_stage: int = NOT_SET, gradient_checkpointing: bool = NOT_SET,
                 param_persistence_threshold: int = NOT_SET, attn_implementation: str = NOT_SET,
                 dist_timeout_s: float = NOT_SET, weight_sync_bucket_bytes: int = NOT_SET) -> Self:
        """Set LearnersConfig's settings."""
        return self._set("learners", **given(locals()))

    @builder
    def training(self, *, lr: float = NOT_SET, lr_schedule: str = NOT_SET, lr_warmup_steps: int = NOT_SET,
                 lr_decay_steps: int = NOT_SET, lr_min_ratio: float = NOT_SET, weight_decay: float = NOT_SET,
                 betas: list[float] = NOT_SET, eps: float = NOT_SET, grad_clip: float = NOT_SET,
                 tasks_per_iteration: int = NOT_SET, group_size: int = NOT_SET, num_minibatches: int = NOT_SET,
                 norm_adv_by_std: bool = NOT_SET, negative_advantage_weight: float = NOT_SET,
                 advantage_estimator: str = NOT_SET, reward_shapers: tuple[str, ...] = NOT_SET,
                 dynamic_sampling: bool = NOT_SET, dynamic_sampling_max_rounds: int = NOT_SET,
                 dynamic_sampling_metric: str | None = NOT_SET, overlong_buffer_tokens: int = NOT_SET,
                 overlong_penalty: float = NOT_SET, stitch_trajectories: bool = NOT_SET,
                 use_rollout_logprobs: bool = NOT_SET, tempered_logprobs: bool = NOT_SET, max_staleness: int = NOT_SET,
                 partial_rollouts: bool = NOT_SET, clip_low: float = NOT_SET, clip_high: float = NOT_SET,
                 dual_clip: float | None = NOT_SET, kl_coef: float = NOT_SET, kl_estimator: str = NOT_SET,
                 kl_in_reward: bool = NOT_SET, aggregation: str = NOT_SET, entropy_coef: float = NOT_SET,
                 value_clip: float = NOT_SET, off_policy_correction: str = NOT_SET, importance_cap: float = NOT_SET,
                 kind: str = NOT_SET) -> Self:
        """Set TrainingConfig's settings, its optimizer's (OptimizerConfig: lr, lr_schedule, ...) and its loss's
        (LossConfig: clip_low, kl_coef, aggregation, ...). An algorithm with training settings of its own (PPO's
        gamma, ...) overrides this method with them and passes the rest on."""
        return self._set("training", **given(locals()))

    @builder
    def evaluation(self, *, evaluation_interval: int = NOT_SET, evaluation_num_tasks: int = NOT_SET,
                   evaluation_temperature: float = NOT_SET, evaluation_env_config: dict = NOT_SET,
                   evaluation_num_envs_per_env_runner: int | None = NOT_SET,
                   evaluation_num_env_runners: int | None = NOT_SET) -> Self:
        """Set EvaluationConfig's settings."""
        return self._set("evaluation", **given(locals()))

    @builder
    def debugging(self, *, seed: int = NOT_SET, wandb_project: str | None = NOT_SET, progress_bars: bool = NOT_SET,
                  check_resources: bool = NOT_SET, check_services: bool = NOT_SET, check_memory: bool = NOT_SET,
                  gpu_memory_gb: float | None = NOT_SET) -> Self:
        """Set DebuggingConfig's settings."""
        return self._set("debugging", **given(locals()))

    @builder
    def fault_tolerance(self, *, episode_retries: int = NOT_SET, failed_iterations_to_stop: int = NOT_SET,
                        max_actor_failures: int = NOT_SET, failure_window_s: float = NOT_SET,
                        actor_start_timeout_s: float = NOT_SET, engine_call_timeout_s: float = NOT_SET,
                        sample_timeout_s: float = NOT_SET, learner_timeout_s: float = NOT_SET,
                        weight_sync_timeout_s: float = NOT_SET, checkpoint_frequency: int = NOT_SET,
                        checkpoint_dir: str | None = NOT_SET, keep_checkpoints: int = NOT_SET,
                        checkpoint_checksums: bool = NOT_SET) -> Self:
        """Set FaultToleranceConfig's settings (deadlines, retries, failure budgets, checkpoints)."""
        return self._set("fault_tolerance", **given(locals()))

    @builder
    def services(self, *, actors: dict[str, dict] = NOT_SET) -> Self:
        """Set the side services the trainer starts, places and stops (memrl.services): {name: ServiceConfig's
        fields}, each reached by the envs as "actor:<name>"."""
        return self._set("services", **given(locals()))

    def settings(self, section: str) -> dict[str, str]:
        """Every setting the builder method `section` takes, as {name: where it lives} (the section's own fields,
        and a nested section's as "sub.name")."""
        out = {}
        for f in dataclasses.fields(getattr(self, f"{section}_cfg")):
            value = getattr(getattr(self, f"{section}_cfg"), f.name)
            if dataclasses.is_dataclass(value):
                out.update({sub.name: f"{f.name}.{sub.name}" for sub in dataclasses.fields(value)})
            else:
                out[f.name] = f.name
        return out

    def _set(self, section: str, **kwargs) -> Self:
        """Set `kwargs` on the section (a nested section's settings on a copy of it); validate() checks them (a
        value may be a Tune search space until a trial resolves it)."""
        cfg, where = getattr(self, f"{section}_cfg"), self.settings(section)
        nested: dict[str, dict] = {}
        for key, value in kwargs.items():
            if key not in where:
                raise ValueError(f"{type(self).__name__}.{section}() has no setting {key!r}; allowed: "
                                 f"{sorted(where)}")
            if "." in where[key]:
                nested.setdefault(where[key].split(".")[0], {})[key] = value
            else:
                setattr(cfg, key, value)
        for name, values in nested.items():
            sub = copy.copy(getattr(cfg, name))  # checked with the rest in validate(): settings may come in any order
            for key, value in values.items():
                setattr(sub, key, value)
            setattr(cfg, name, sub)
        return self

    # -- validation, building, serialisation ----------------------------------------------
    def validate(self) -> None:
        """Raise ValueError naming the first bad field and what is allowed (values only; `check_components` loads
        what the fields name)."""
        from memrl.preflight import check_types

        for name in SECTIONS:
            check_types(name, getattr(self, f"{name}_cfg"))
        env, run, learn, train = self.environment_cfg, self.env_runners_cfg, self.learners_cfg, self.training_cfg
        if not env.env:
            raise ValueError("environment.env is not set; pass a registered gymnasium id, e.g. 'memrl/Echo-v0'")
        if not learn.model_path:
            raise ValueError("learners.model_path is not set; pass a local Hugging Face checkpoint directory")
        ENGINES.check(run.engine)
        from memrl.workflows import workflow_class

        workflow_class(run.workflow)
        if not isinstance(run.num_env_runners, numbers.Integral) or run.num_env_runners < 0:
            raise ValueError(f"env_runners.num_env_runners={run.num_env_runners!r} is not allowed; it must be an "
                             "integer >= 0 (0: the runners run in the algorithm's process)")
        if run.num_engines == 0:
            in_process = {"env_runners.engine": (run.engine, "torch"),
                          "env_runners.num_env_runners": (run.num_env_runners, 0),
                          "evaluation.evaluation_num_env_runners": (
                              self.evaluation_cfg.evaluation_num_env_runners or 0, 0),  # None: training's layout
                          "env_runners.continuous_batching": (run.batches_continuously, False),
                          "env_runners.num_gpus_per_engine": (run.num_gpus_per_engine, 0),
                          "env_runners.resources_per_engine": (run.resources_per_engine, {})}
            for setting, (value, allowed) in in_process.items():
                if value != allowed:
                    raise ValueError(f"{setting}={value!r} is not allowed with env_runners.num_engines=0, which runs "
                                     f"one torch engine in the algorithm's process (runner actors cannot reach it); "
                                     f"set it to {allowed!r} or num_engines >= 1")
        if run.num_env_runners == 0 and run.resources_per_env_runner:
            raise ValueError("env_runners.resources_per_env_runner places runner actors; with num_env_runners=0 the "
                             "runners run in the algorithm's process (set num_env_runners >= 1 to place them)")
        positive = {
            "env_runners.num_envs_per_env_runner": run.num_envs_per_env_runner,
            "env_runners.max_calls_per_episode": run.max_calls_per_episode,
            "env_runners.num_cpus_per_engine": run.num_cpus_per_engine,
            "training.tasks_per_iteration": train.tasks_per_iteration,
            "training.group_size": train.group_size,
            "training.num_minibatches": train.num_minibatches,
            "training.dynamic_sampling_max_rounds": train.dynamic_sampling_max_rounds,
            "evaluation.evaluation_num_tasks": self.evaluation_cfg.evaluation_num_tasks,
        }
        gpus = run.num_gpus_per_engine
        if not (0 <= gpus <= 1 or gpus == int(gpus)):
            raise ValueError(f"env_runners.num_gpus_per_engine={gpus!r} is not allowed; it must be a share of one GPU "
                             "(0 to 1) or a whole number of GPUs, over which the engine splits the model (one "
                             "tensor-parallel worker each)")
        for setting, custom in (("learners.resources_per_learner", learn.resources_per_learner),
                                ("env_runners.resources_per_engine", run.resources_per_engine),
                                ("env_runners.resources_per_env_runner", run.resources_per_env_runner)):
            check_custom_resources(setting, custom)
        gpu_memory_gb = self.debugging_cfg.gpu_memory_gb
        if gpu_memory_gb is not None and not gpu_memory_gb > 0:
            raise ValueError(f"debugging.gpu_memory_gb={gpu_memory_gb!r} is not allowed; it must be > 0 (the GB of "
                             "each GPU) or None")
        faults = self.fault_tolerance_cfg
        positive["fault_tolerance.max_actor_failures"] = faults.max_actor_failures
        for name in ("failure_window_s", "actor_start_timeout_s", "engine_call_timeout_s", "sample_timeout_s",
                     "learner_timeout_s", "weight_sync_timeout_s"):
            if not getattr(faults, name) > 0:
                raise ValueError(f"fault_tolerance.{name}={getattr(faults, name)!r} is not allowed; it must be > 0")
        positive["fault_tolerance.keep_checkpoints"] = faults.keep_checkpoints
        positive["fault_tolerance.failed_iterations_to_stop"] = faults.failed_iterations_to_stop
        if faults.checkpoint_frequency < 0:
            raise ValueError(f"fault_tolerance.checkpoint_frequency={faults.checkpoint_frequency!r} is not allowed; "
                             "it must be >= 0 (0: no periodic checkpoints)")
        if faults.checkpoint_frequency and not faults.checkpoint_dir:
            raise ValueError(f"fault_tolerance.checkpoint_frequency={faults.checkpoint_frequency} needs "
                             "fault_tolerance.checkpoint_dir, the directory the periodic checkpoints go to")
        if faults.episode_retries < 0:
            raise ValueError(f"fault_tolerance.episode_retries={faults.episode_retries!r} is not allowed; it must be "
                             ">= 0")
        self.services_cfg.specs()
        eval_runners = self.evaluation_cfg.evaluation_num_env_runners
        if eval_runners is not None and (not isinstance(eval_runners, numbers.Integral) or eval_runners < 0):
            raise ValueError(f"evaluation.evaluation_num_env_runners={eval_runners!r} is not allowed; it must be None "
                             "(runner actors laid out as training's), 0 (that layout in the algorithm's process) or "
                             "an integer >= 1 (that many runner actors)")
        if self.evaluation_cfg.evaluation_num_envs_per_env_runner is not None:
            positive["evaluation.evaluation_num_envs_per_env_runner"] = \
                self.evaluation_cfg.evaluation_num_envs_per_env_runner
        if not isinstance(run.num_engines, numbers.Integral) or run.num_engines < 0:
            raise ValueError(f"env_runners.num_engines={run.num_engines!r} is not allowed; it must be an integer >= 0 "
                             "(0: one torch engine in the algorithm's process)")
        for name, value in positive.items():
            if not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        if train.group_size < self.min_group_size:
            raise ValueError(f"training.group_size={train.group_size} is not allowed for {type(self).__name__}: its "
                             f"advantages compare trajectories of one task, so it needs >= {self.min_group_size}")
        if not 0 <= train.overlong_buffer_tokens <= run.sampling.max_tokens:
            raise ValueError(f"training.overlong_buffer_tokens={train.overlong_buffer_tokens!r} is not allowed; "
                             f"it must be in [0, env_runners.max_tokens={run.sampling.max_tokens}]")
        from memrl.learner.advantages import ADVANTAGES, REWARD_SHAPERS

        ADVANTAGES.check(train.advantage_estimator)
        for shaper in train.reward_shapers:
            REWARD_SHAPERS.check(shaper)
        if train.advantage_estimator in ("call", "call_by_position") and (train.overlong_buffer_tokens
                                                                          or train.loss.kl_in_reward):
            raise ValueError(f"training.advantage_estimator={train.advantage_estimator!r} is not allowed with "
                             "overlong_buffer_tokens or loss.kl_in_reward: both shape the trajectory's reward, and "
                             "call advantages use each call's own")
        if (train.advantage_estimator == "gae") != self.has_critic:
            raise ValueError(f"training.advantage_estimator={train.advantage_estimator!r} is not allowed for "
                             f"{type(self).__name__}: 'gae' needs a critic's values, and only PPO trains a critic "
                             "(PPO needs 'gae')")
        if not 0 <= train.negative_advantage_weight <= 1:
            raise ValueError(f"training.negative_advantage_weight={train.negative_advantage_weight!r} is not "
                             "allowed; it must be in [0, 1]")
        if train.dynamic_sampling_metric is not None and not train.dynamic_sampling:
            raise ValueError(f"training.dynamic_sampling_metric={train.dynamic_sampling_metric!r} needs "
                             "training.dynamic_sampling=True (it says what dynamic sampling compares)")
        sampling = run.sampling
        if train.tempered_logprobs and not (sampling.temperature > 0 and sampling.top_p == 1):
            raise ValueError(f"training.tempered_logprobs needs env_runners.temperature > 0 and top_p == 1 (the "
                             f"learners score the whole tempered distribution); got temperature="
                             f"{sampling.temperature}, top_p={sampling.top_p}")
        if not isinstance(train.max_staleness, numbers.Integral) or train.max_staleness < 0:
            raise ValueError(f"training.max_staleness={train.max_staleness!r} is not allowed; it must be an integer "
                             ">= 0 (0: synchronous)")
        if train.partial_rollouts and not train.max_staleness:
            raise ValueError("training.partial_rollouts=True needs training.max_staleness >= 1 (a batch sampled while "
                             "the learner trains)")
        correction = train.loss.off_policy_correction
        if correction != "none" and train.use_rollout_logprobs:
            raise ValueError(f"training.off_policy_correction={correction!r} weighs the learner's logprobs against the "
                             "engine's, so it needs training.use_rollout_logprobs=False")
        for section, sub in (("env_runners", run.sampling), ("training", train.loss)):
            _checked(section, sub)  # the nested sections check their own settings
        self.learner_config()  # LearnerConfig checks the learners' and the optimizer's settings

    def learner_config(self, **choices) -> LearnerConfig:
        """The policy learners' LearnerConfig: the learners and optimizer sections as they are, the run's seed, the
        temperature the logits are scored at (training.tempered_logprobs), and `choices` of LearnerConfig's own
        (compute_ref, head)."""
        train = self.training_cfg
        temperature = self.env_runners_cfg.sampling.temperature if train.tempered_logprobs else 1.0
        return LearnerConfig(learners=self.learners_cfg, optimizer=train.optimizer, seed=self.debugging_cfg.seed,
                             logit_temperature=temperature, **choices)

    def weight_sync_backend(self) -> str:
        """The learner-to-engine broadcast's backend: NCCL where the learners and the engines each hold whole GPUs
        (NCCL takes one rank per GPU), gloo otherwise: on CPUs, and where a learner and an engine share a GPU by
        fractions (gloo moves CUDA tensors through host memory)."""
        learn, run = self.learners_cfg, self.env_runners_cfg
        return "nccl" if learn.num_gpus_per_learner >= 1 and run.num_gpus_per_engine >= 1 else "gloo"

    def actor_groups(self) -> list[tuple[str, int, int, float, dict, str]]:
        """The algorithm's actors that reserve resources, as (name, count, CPUs each, GPUs each, custom resources
        each, the setting that sizes them): learners, engines, env runners (no CPU: they wait on an engine; only
        their custom resources) and each side service ("service <name>")."""
        run, learn = self.env_runners_cfg, self.learners_cfg
        groups = [("learners", learn.num_learners, learn.num_cpus_per_learner, learn.num_gpus_per_learner,
                   learn.resources_per_learner,
                   "learners(num_learners=..., num_cpus_per_learner=..., num_gpus_per_learner=..., "
                   "resources_per_learner=...)"),
                  ("engines", run.num_engines, run.num_cpus_per_engine, run.num_gpus_per_engine,
                   run.resources_per_engine,
                   "env_runners(num_engines=..., num_cpus_per_engine=..., num_gpus_per_engine=..., "
                   "resources_per_engine=...)")]
        if run.resources_per_env_runner:
            groups.append(("env runners", run.num_env_runners, 0, 0.0, run.resources_per_env_runner,
                           "env_runners(num_env_runners=..., resources_per_env_runner=...)"))
        for name, spec in self.services_cfg.specs().items():
            groups.append((f"service {name}", 1, spec.num_cpus, spec.num_gpus, spec.resources,
                           f"services(actors={{{name!r}: {{'num_cpus': ..., 'num_gpus': ..., 'resources': ...}}}})"))
        return groups

    def resources(self) -> tuple[dict[str, float], list[str]]:
        """The resources the algorithm's actors reserve ({"CPU": n, "GPU": m, and any custom ones}), and how they
        add up, in words."""
        groups = self.actor_groups()
        needs = {"CPU": float(sum(count * cpus for _, count, cpus, *_ in groups)),
                 "GPU": sum(count * gpus for _, count, _, gpus, *_ in groups)}
        for _, count, _, _, custom, _ in groups:
            for key, amount in custom.items():
                needs[key] = needs.get(key, 0.0) + count * amount
        parts = [f"{count} {name} x ({', '.join(_amounts(cpus, gpus, custom))})"
                 for name, count, cpus, gpus, custom, _ in groups]
        return needs, parts

    def trial_bundles(self) -> tuple[list[dict[str, float]], dict[str, list[int]]]:
        """A Ray Tune trial's placement group, so trials pack exactly: bundle 0 holds the algorithm itself (1 CPU)
        and its env runners' custom resources, then one bundle per learner, engine (and critic learner). Returns the
        bundles and which of them each kind of actor (actor_groups' names) takes."""
        driver: dict[str, float] = {"CPU": 1.0}
        bundles, taken = [driver], {}
        for name, count, cpus, gpus, custom, _ in self.actor_groups():
            if name == "env runners":  # runners reserve no CPU: they share the algorithm's bundle
                for key, amount in custom.items():
                    driver[key] = driver.get(key, 0.0) + count * amount
                taken[name] = [0] * count
                continue
            one = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {}), **custom}
            taken[name] = list(range(len(bundles), len(bundles) + count))
            bundles += [dict(one) for _ in range(count)]
        return bundles, taken

    def check_resources(self, total: dict[str, float] | None = None) -> None:
        """Fail at once, naming the settings, when the running Ray cluster (or one with `total` resources) cannot
        hold the algorithm's actors (see debugging.check_resources)."""
        if not self.debugging_cfg.check_resources:
            return
        from memrl.cluster import check_resources

        needs, parts = self.resources()
        settings = list(dict.fromkeys(setting for *_, setting in self.actor_groups()))
        check_resources(needs, type(self).__name__, parts, settings, total)

    def check_memory(self) -> None:
        """Fail at once, naming the figures and the settings, when a learner or an engine that reserves GPUs would
        not fit its share of one (see debugging.check_memory and gpu_memory_gb); starts nothing."""
        dbg, learn, run = self.debugging_cfg, self.learners_cfg, self.env_runners_cfg
        uses_gpus = learn.num_gpus_per_learner > 0 or (run.engine == "vllm" and run.num_gpus_per_engine > 0)
        if not dbg.check_memory or not uses_gpus or not (Path(learn.model_path) / "config.json").is_file():
            return  # (check_components names a model directory without a config)
        from memrl.memory_plan import local_gpu_memory_gb

        gpu_memory_gb = dbg.gpu_memory_gb or local_gpu_memory_gb()
        if gpu_memory_gb is None:
            return
        problems = self.plan(gpu_memory_gb).problems()
        if problems:
            raise ValueError(f"{type(self).__name__} does not fit GPUs of {gpu_memory_gb:g} GB (debugging."
                             f"gpu_memory_gb, or this machine's): " + "; ".join(problems) + ". Print the whole plan "
                             "with config.plan(gpu_memory_gb).table(); debugging.check_memory=False skips this check")

    def plan(self, gpu_memory_gb: float | None = None):
        """The GPU memory plan (memrl.memory_plan.MemoryPlan) of this config's learners and engines on GPUs of
        `gpu_memory_gb` GB each: print it with `.table()`, `.problems()` names what does not fit. Reads the model's
        sizes from learners.model_path's config.json; starts nothing."""
        from memrl.memory_plan import plan

        return plan(self, gpu_memory_gb)

    def check_components(self) -> None:
        """Load what the config names (env, model directory and tokenizer, workflow, engine options) and fail naming
        the field when one cannot be used; starts nothing (memrl.preflight)."""
        from memrl.preflight import check_components

        check_components(self)

    def check_services(self) -> None:
        """Raise ValueError naming an env option whose service (a named actor, a URL) is not there (see
        debugging.check_services); Ray must be running."""
        if self.debugging_cfg.check_services:
            from memrl.preflight import check_services

            check_services(self)

    def build(self):
        """Validate, check the components, start Ray if this process has not (sized for the actors), and construct
        the Algorithm (starts its actors)."""
        if self.algo_class is None:
            raise ValueError(f"{type(self).__name__} has no algo_class; use an algorithm's config, e.g. DAPOConfig")
        self.validate()
        self.check_memory()
        self.check_components()
        from memrl.cluster import ensure_ray, planned_resources

        cpus = int(self.resources()[0]["CPU"])
        if (planned := planned_resources(cpus)) is not None:
            self.check_resources(planned)  # before starting a Ray that could not hold the actors
        ensure_ray(cpus)
        return self.algo_class(config=self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (one key per section); Ray Tune accepts it, search spaces included."""
        out = {name: dataclasses.asdict(getattr(self, f"{name}_cfg")) for name in SECTIONS}
        out["algo"] = type(self).__name__
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlgorithmConfig:
        """Rebuild a config from `to_dict` output (unknown sections or fields are errors)."""
        config = cls()
        data = copy.deepcopy(data)
        data.pop("algo", None)
        for name, values in data.items():
            if name not in SECTIONS:
                raise ValueError(f"unknown config section {name!r}; allowed: {sorted(SECTIONS)}")
            values = dict(values)
            for key in [k for k, v in values.items() if isinstance(v, dict) and k not in config.settings(name)]:
                values.update(values.pop(key))  # a nested section (training.loss, ...) as to_dict writes it
            if name == "environment":
                config.environment(values.pop("env", None), env_config=values.pop("env_config", None))
            config._set(name, **values)
        return config

    def copy(self) -> AlgorithmConfig:
        """An independent copy."""
        return copy.deepcopy(self)


RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
"""Ray's own resource names, which the num_cpus/num_gpus settings (or Ray itself) set, never a custom resource."""


def check_custom_resources(setting: str, custom: dict) -> None:
    """Raise ValueError unless `custom` maps custom resource names (not Ray's own) to amounts > 0."""
    for key, amount in custom.items():
        if not isinstance(key, str) or not key or key in RESERVED_RESOURCES:
            raise ValueError(f"{setting} has the key {key!r}; its keys are custom resource names (not "
                             f"{', '.join(RESERVED_RESOURCES)}: num_cpus_*/num_gpus_* set those)")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount > 0:
            raise ValueError(f"{setting}[{key!r}]={amount!r} is not allowed; it must be a number > 0")


def _amounts(cpus: float, gpus: float, custom: dict) -> list[str]:
    return [f"{cpus:g} CPU", f"{gpus:g} GPU", *(f"{amount:g} {key}" for key, amount in custom.items())]
