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
        (lambda c: c.env_runners(engine="sglang"), r"env_runners.engine='sglang' is not allowed.*'torch', 'vllm'"),
        (lambda c: c.env_runners(workflow="nope"), "env_runners.workflow='nope' is not registered"),
        (lambda c: c.training(group_size=0), "training.group_size=0 is not allowed"),
        (lambda c: c.training(num_minibatches=0), "training.num_minibatches=0 is not allowed"),
        (lambda c: c.env_runners(num_env_runners=1.5), "env_runners.num_env_runners=1.5 is not allowed"),
        (lambda c: c.training(lr=0.0), "training.lr=0.0 is not allowed"),
        (lambda c: c.evaluation(evaluation_num_tasks=0), "evaluation.evaluation_num_tasks=0 is not allowed"),
        (lambda c: c.evaluation(evaluation_num_envs_per_env_runner=0),
         "evaluation.evaluation_num_envs_per_env_runner=0 is not allowed"),
        (lambda c: c.env_runners(temperature=-1.0), "temperature"),
        (lambda c: c.training(aggregation="mean"), "aggregation"),
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
