import dataclasses
import inspect

import pytest

from memrl.algorithms import DAPO, DAPOConfig, GRPOConfig, MemAlphaConfig, MemPOConfig, PPOConfig
from memrl.algorithms.sft import SFTConfig
from memrl.config import AlgorithmConfig


def _valid(config: AlgorithmConfig, tmp_path) -> AlgorithmConfig:
    return config.environment("memrl/Echo-v0").learners(model_path=str(tmp_path))


def test_builder_sets_sections_and_loss_fields():
    config = (DAPOConfig().environment("memrl/Echo-v0", env_config={"num_turns": 3})
              .env_runners(num_env_runners=2, engine="vllm").learners(num_learners=2)
              .training(lr=3e-4, group_size=4, clip_high=0.3, kl_coef=0.001))
    assert config.environment_cfg.env_config == {"num_turns": 3}
    assert config.env_runners_cfg.engine == "vllm"
    assert config.learners_cfg.num_learners == 2
    assert config.training_cfg.optimizer.lr == 3e-4 and config.training_cfg.group_size == 4
    assert config.training_cfg.loss.clip_high == 0.3 and config.training_cfg.loss.kl_coef == 0.001
    assert config.training_cfg.loss.clip_low == 0.2  # untouched DAPO default


def test_continuous_batching_is_on_for_engines_on_gpus_unless_set():
    run = DAPOConfig().env_runners_cfg
    assert run.continuous_batching is None and not run.batches_continuously  # CPU engines: repeatable batches
    assert DAPOConfig().env_runners(num_gpus_per_engine=1).env_runners_cfg.batches_continuously
    assert not DAPOConfig().env_runners(num_gpus_per_engine=1, continuous_batching=False).env_runners_cfg \
        .batches_continuously
    assert DAPOConfig().env_runners(continuous_batching=True).env_runners_cfg.batches_continuously


def test_algorithm_defaults_differ():
    dapo, grpo = DAPOConfig(), GRPOConfig()
    assert not dapo.training_cfg.norm_adv_by_std and grpo.training_cfg.norm_adv_by_std
    assert dapo.training_cfg.loss.clip_high == 0.28 and grpo.training_cfg.loss.clip_high == 0.2
    assert dapo.training_cfg.dynamic_sampling and not grpo.training_cfg.dynamic_sampling
    assert DAPOConfig.algo_class is DAPO


def test_dict_round_trip(tmp_path):
    config = _valid(DAPOConfig(), tmp_path).training(group_size=3, aggregation="seq_mean_token_mean")
    data = config.to_dict()
    assert data["algo"] == "DAPOConfig"
    back = DAPOConfig.from_dict(data)
    assert back.to_dict() == data


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"DAPOConfig.learners\(\) has no setting 'num_gpu'; allowed: .*'num_gpus_per"):
        DAPOConfig().learners(num_gpu=1)
    with pytest.raises(ValueError, match=r"PPOConfig.training\(\) has no setting 'gama'; allowed: .*'gamma'"):
        PPOConfig().training(gama=0.9)
    with pytest.raises(ValueError, match="unknown config section 'trainer'"):
        DAPOConfig.from_dict({"trainer": {}})


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.environment_cfg.__setattr__("env", None), "environment.env is not set"),
        (lambda c: c.learners(model_path=None), "learners.model_path is not set"),
        (lambda c: c.env_runners(engine="sglang"), r"env_runners.engine='sglang' is not registered.*'torch', 'vllm'"),
        (lambda c: c.env_runners(workflow="nope"), "env_runners.workflow='nope' is not registered"),
        (lambda c: c.training(group_size=0), "training.group_size=0 is not allowed"),
        (lambda c: c.training(num_minibatches=0), "training.num_minibatches=0 is not allowed"),
        (lambda c: c.env_runners(num_env_runners=1.5), "env_runners.num_env_runners=1.5 is not allowed"),
        (lambda c: c.env_runners(num_env_runners=-1),
         r"env_runners.num_env_runners=-1 is not allowed; it must be an integer >= 0 \(0: the runners run in"),
        (lambda c: c.env_runners(num_env_runners=0, resources_per_env_runner={"head": 0.01}),
         "env_runners.resources_per_env_runner places runner actors; with num_env_runners=0"),
        (lambda c: c.training(lr=0.0), "training.lr=0.0 is not allowed"),
        (lambda c: c.env_runners(max_tokens=8).training(advantage_estimator="call_by_position",
                                                         overlong_buffer_tokens=4),
         "training.advantage_estimator='call_by_position' is not allowed with overlong_buffer_tokens or "
         "loss.kl_in_reward"),
        (lambda c: c.training(advantage_estimator="gae"), "'gae' needs a critic's values"),
        (lambda c: c.training(advantage_estimator="rank"), "training.advantage_estimator='rank' is not registered"),
        (lambda c: c.training(reward_shapers=("overlong", "length")),
         "training.reward_shapers='length' is not registered"),
        (lambda c: c.training(negative_advantage_weight=1.5),
         r"training.negative_advantage_weight=1.5 is not allowed; it must be in \[0, 1\]"),
        (lambda c: c.training(dynamic_sampling=False, dynamic_sampling_metric="r_acc"),
         "training.dynamic_sampling_metric='r_acc' needs training.dynamic_sampling=True"),
        (lambda c: c.evaluation(evaluation_num_tasks=0), "evaluation.evaluation_num_tasks=0 is not allowed"),
        (lambda c: c.evaluation(evaluation_num_envs_per_env_runner=0),
         "evaluation.evaluation_num_envs_per_env_runner=0 is not allowed"),
        (lambda c: c.env_runners(num_engines=-1), "env_runners.num_engines=-1 is not allowed; it must be an integer"),
        (lambda c: c.env_runners(num_engines=0, num_env_runners=2),
         "env_runners.num_env_runners=2 is not allowed with env_runners.num_engines=0, which runs one torch engine in "
         "the algorithm's process"),
        (lambda c: c.env_runners(num_engines=0, num_env_runners=0, engine="vllm"),
         "env_runners.engine='vllm' is not allowed with env_runners.num_engines=0"),
        (lambda c: c.env_runners(num_engines=0, num_env_runners=0).evaluation(evaluation_num_env_runners=1),
         "evaluation.evaluation_num_env_runners=1 is not allowed with env_runners.num_engines=0"),
        (lambda c: c.evaluation(evaluation_num_env_runners=-1),
         r"evaluation.evaluation_num_env_runners=-1 is not allowed; it must be None .*, 0 .* or an integer >= 1"),
        (lambda c: c.env_runners(temperature=-1.0), "temperature"),
        (lambda c: c.training(aggregation="mean"), "aggregation"),
        (lambda c: c.fault_tolerance(checkpoint_frequency=5),
         "fault_tolerance.checkpoint_frequency=5 needs fault_tolerance.checkpoint_dir"),
        (lambda c: c.fault_tolerance(checkpoint_frequency=-1), "fault_tolerance.checkpoint_frequency=-1 is not"),
        (lambda c: c.fault_tolerance(keep_checkpoints=0), "fault_tolerance.keep_checkpoints=0 is not allowed"),
        (lambda c: c.env_runners(temperature=0.0).training(tempered_logprobs=True),
         "tempered_logprobs needs env_runners.temperature > 0 and top_p == 1 .*temperature=0.0"),
        (lambda c: c.env_runners(temperature=0.7, top_p=0.9).training(tempered_logprobs=True),
         "tempered_logprobs needs .*top_p=0.9"),
        (lambda c: c.training(max_staleness=-1), "training.max_staleness=-1 is not allowed"),
        (lambda c: c.training(max_staleness=1.5), "training.max_staleness=1.5 is not allowed"),
        (lambda c: c.training(partial_rollouts=True), "partial_rollouts=True needs training.max_staleness >= 1"),
        (lambda c: c.training(off_policy_correction="tis"),
         "off_policy_correction='tis' .*training.use_rollout_logprobs=False"),
    ],
)
def test_validation_names_field_and_allowed_values(tmp_path, change, message):
    config = _valid(DAPOConfig(), tmp_path)
    config.validate()
    with pytest.raises(ValueError, match=message):  # raised by the builder call or by validate()
        change(config)
        config.validate()


def test_plain_config_cannot_build(tmp_path):
    with pytest.raises(ValueError, match="no algo_class"):
        _valid(AlgorithmConfig(), tmp_path).build()


def test_the_learners_get_their_sections_unchanged(tmp_path):
    config = (_valid(DAPOConfig(), tmp_path)
              .learners(zero_stage=2, attn_implementation="eager", dist_timeout_s=60.0, param_persistence_threshold=7,
                        padding_free=True)
              .training(betas=[0.8, 0.95], eps=1e-6, lr=3e-4, lr_schedule="cosine", lr_warmup_steps=5,
                        lr_decay_steps=50, lr_min_ratio=0.1).debugging(seed=9))
    learner = config.learner_config(compute_ref=True)
    assert learner.learners == config.learners_cfg and learner.optimizer == config.training_cfg.optimizer
    assert (learner.optimizer.lr, learner.learners.zero_stage, learner.seed, learner.model_path) == \
        (3e-4, 2, 9, str(tmp_path))
    assert learner.compute_ref and learner.head == "lm"
    # A config restored from JSON maps the same.
    assert DAPOConfig.from_dict(config.to_dict()).learner_config(compute_ref=True) == learner
    # The learners score the sampling temperature's distribution only when asked to.
    config.env_runners(temperature=0.7)
    assert config.learner_config().logit_temperature == 1.0
    config.training(tempered_logprobs=True)  # the engines return tempered logprobs: rollout logprobs are the old ones
    config.validate()
    assert config.learner_config().logit_temperature == 0.7
    # Off-policy correction compares two tempered distributions.
    config.training(use_rollout_logprobs=False, off_policy_correction="decoupled").validate()


CONFIGS = [AlgorithmConfig, DAPOConfig, GRPOConfig, PPOConfig, MemPOConfig, MemAlphaConfig, SFTConfig]


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_each_builder_method_takes_exactly_its_sections_settings(config_class):
    """A setting is defined once, in its section's dataclass; the builder methods list the same names as keyword
    arguments (an editor completes them), through the base method where a config adds settings of its own."""
    config = config_class()
    for section in ("environment", "env_runners", "learners", "training", "evaluation", "debugging",
                    "fault_tolerance", "services"):
        taken: set[str] = set()
        for klass in config_class.__mro__:
            method = klass.__dict__.get(section)
            if method is not None:
                params = inspect.signature(inspect.unwrap(method)).parameters.values()
                taken |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - {"self"}
        assert taken == set(config.settings(section)), (config_class.__name__, section)


def test_no_setting_has_a_second_default():
    """What the learners and the env runners are handed has no default of its own for a builder setting: the
    sections come whole (their defaults are the builder's), the rest is given by the algorithm."""
    from memrl.learner.learner_config import LearnerConfig
    from memrl.learner.learner_group import LearnerGroup
    from memrl.rollout.env_runner import EnvRunnerSpec
    from memrl.rollout.env_runner_group import EnvRunnerGroup

    config = PPOConfig()
    settings = {name for section in ("env_runners", "learners", "training", "evaluation", "debugging",
                                     "fault_tolerance") for name in config.settings(section)}
    for cls in (LearnerConfig, EnvRunnerSpec):
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            assert not (has_default and f.name in settings), (cls.__name__, f.name)
    for function in (LearnerGroup.__init__, EnvRunnerGroup.__init__):
        defaults = {p.name for p in inspect.signature(function).parameters.values() if p.default is not p.empty}
        assert not defaults & settings, (function.__qualname__, defaults & settings)


@pytest.mark.parametrize("change, message", [
    (lambda c: c.learners(zero_stage=4), "learners.zero_stage=4 is not allowed; it must be 1, 2 or 3"),
    (lambda c: c.learners(attn_implementation="flash"), "learners.attn_implementation='flash' is not allowed"),
    (lambda c: c.learners(dist_timeout_s=0), "learners.dist_timeout_s=0 is not allowed; it must be > 0"),
    (lambda c: c.learners(dtype="float16"), "learners.dtype='float16' is not allowed; it must be one of"),
    (lambda c: c.learners(padding_free=1), "learners.padding_free=1 is not allowed; it must be True or False"),
    (lambda c: c.learners(num_learners=-1), "learners.num_learners=-1 is not allowed; it must be an integer >= 0"),
    (lambda c: c.learners(num_learners=0, num_gpus_per_learner=1),
     r"learners.num_learners=0 trains in the algorithm's own process, on its CPUs, .* num_gpus_per_learner=1"),
    (lambda c: c.training(betas=[0.9, 1.0]), r"training.betas=\[0.9, 1.0\] is not allowed; it must be two values"),
    (lambda c: c.training(eps=0.0), "training.eps=0.0 is not allowed; it must be > 0"),
    (lambda c: c.training(weight_decay=-1.0), "training.weight_decay=-1.0 is not allowed; it must be >= 0"),
    (lambda c: c.training(lr_schedule="step"), "training.lr_schedule='step' is not allowed; it must be one of"),
    (lambda c: c.training(lr_warmup_steps=-1), "training.lr_warmup_steps=-1 is not allowed"),
    (lambda c: c.training(lr_schedule="linear"), r"training.lr_decay_steps=0 is not allowed with lr_schedule="
     r"'linear': it must be > lr_warmup_steps \(0\)"),
    (lambda c: c.training(lr_min_ratio=1.5), r"training.lr_min_ratio=1.5 is not allowed; it must be in \[0, 1\]"),
    (lambda c: c.env_runners(max_tokens=0), "env_runners.max_tokens must be >= 1, got 0"),
    (lambda c: c.training(clip_low=1.0), r"training.clip_low must be in \[0, 1\), got 1.0"),
])
def test_bad_learner_settings_are_named_by_their_builder_field(tmp_path, change, message):
    config = change(_valid(DAPOConfig(), tmp_path))
    with pytest.raises(ValueError, match=message):
        config.validate()
