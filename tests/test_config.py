import pytest

from memrl.algorithms import DAPO, DAPOConfig, GRPOConfig
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
    assert config.training_cfg.lr == 3e-4 and config.training_cfg.group_size == 4
    assert config.training_cfg.loss.clip_high == 0.3 and config.training_cfg.loss.kl_coef == 0.001
    assert config.training_cfg.loss.clip_low == 0.2  # untouched DAPO default


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
    with pytest.raises(ValueError, match="has no field 'num_gpu'.*allowed"):
        DAPOConfig().learners(num_gpu=1)
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


def test_every_learner_setting_is_reachable_from_the_builder(tmp_path):
    import dataclasses

    from memrl.config import LEARNER_SETTINGS
    from memrl.learner.learner_config import LearnerConfig

    chosen = {f.name for f in dataclasses.fields(LearnerConfig)} - {"compute_ref", "head", "logit_temperature"}
    assert set(LEARNER_SETTINGS) == chosen
    config = (_valid(DAPOConfig(), tmp_path)
              .learners(zero_stage=2, attn_implementation="eager", dist_timeout_s=60.0, param_persistence_threshold=7)
              .training(betas=(0.8, 0.95), eps=1e-6, lr=3e-4, lr_schedule="cosine", lr_warmup_steps=5,
                        lr_decay_steps=50, lr_min_ratio=0.1).debugging(seed=9))
    learner = config.learner_config(compute_ref=True)
    assert (learner.zero_stage, learner.attn_implementation, learner.dist_timeout_s) == (2, "eager", 60.0)
    assert (learner.betas, learner.eps, learner.lr, learner.seed) == ((0.8, 0.95), 1e-6, 3e-4, 9)
    assert learner.param_persistence_threshold == 7 and learner.compute_ref and learner.model_path == str(tmp_path)
    assert (learner.lr_schedule, learner.lr_warmup_steps, learner.lr_decay_steps, learner.lr_min_ratio) == \
        ("cosine", 5, 50, 0.1)
    # A config restored from JSON (lists for tuples) maps the same.
    assert DAPOConfig.from_dict(config.to_dict()).learner_config(compute_ref=True) == learner
    # The learners score the sampling temperature's distribution only when asked to.
    config.env_runners(temperature=0.7)
    assert config.learner_config().logit_temperature == 1.0
    config.training(tempered_logprobs=True)  # the engines return tempered logprobs: rollout logprobs are the old ones
    config.validate()
    assert config.learner_config().logit_temperature == 0.7
    # Off-policy correction compares two tempered distributions.
    config.training(use_rollout_logprobs=False, off_policy_correction="decoupled").validate()


@pytest.mark.parametrize("change, message", [
    (lambda c: c.learners(zero_stage=4), "learners.zero_stage must be 1, 2 or 3, got 4"),
    (lambda c: c.learners(attn_implementation="flash"), "learners.attn_implementation must be one of"),
    (lambda c: c.learners(dist_timeout_s=0), "learners.dist_timeout_s must be > 0"),
    (lambda c: c.learners(dtype="float16"), "learners.dtype must be one of"),
    (lambda c: c.training(betas=(0.9, 1.0)), r"training.betas must be two values in \[0, 1\)"),
    (lambda c: c.training(eps=0.0), "training.eps must be > 0"),
    (lambda c: c.training(weight_decay=-1.0), "training.weight_decay must be >= 0"),
    (lambda c: c.training(lr_schedule="step"), "training.lr_schedule must be one of"),
    (lambda c: c.training(lr_warmup_steps=-1), "training.lr_warmup_steps must be an integer >= 0"),
    (lambda c: c.training(lr_schedule="linear"), r"training.lr_decay_steps must be > lr_warmup_steps \(0\)"),
    (lambda c: c.training(lr_min_ratio=1.5), r"training.lr_min_ratio must be in \[0, 1\]"),
])
def test_bad_learner_settings_are_named_by_their_builder_field(tmp_path, change, message):
    config = change(_valid(DAPOConfig(), tmp_path))
    with pytest.raises(ValueError, match=message):
        config.validate()
