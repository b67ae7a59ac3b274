"""Side services: checked with the config, started and stopped as named actors, and named to the envs."""

import pytest

from memrl.algorithms import DAPOConfig
from memrl.services import ServiceConfig, point_at, start_services, stop_services

CHAT = "memrl.engines.chat:ChatActor"


def _config(tmp_path, **actors) -> DAPOConfig:
    return DAPOConfig().environment("memrl/Echo-v0").learners(model_path=str(tmp_path)).services(actors=actors)


@pytest.mark.parametrize("actors, message", [
    ({"": {"actor_class": CHAT}}, "a service's name is a non-empty string without ':'"),
    ({"a:b": {"actor_class": CHAT}}, "a service's name is a non-empty string without ':'"),
    ({"judge": {"options": {}}}, r"services.actors\['judge'\] needs actor_class"),
    ({"judge": {"actor_class": CHAT, "gpus": 1}}, r"services.actors\['judge'\] has no setting 'gpus'; allowed"),
    ({"judge": {"actor_class": "ChatActor"}}, r"services.actors\['judge'\].actor_class='ChatActor' is not allowed"),
    ({"judge": {"actor_class": CHAT, "num_cpus": -1}}, r"services.actors\['judge'\].num_cpus=-1 is not allowed"),
    ({"judge": {"actor_class": CHAT, "resources": {"GPU": 1}}}, "custom resource names"),
    ({"judge": "chat"}, r"services.actors\['judge'\]='chat' is not allowed"),
])
def test_bad_services_are_named(tmp_path, actors, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **actors).validate()


def test_a_service_class_that_does_not_import_is_named(tiny_checkpoint):
    config = _config(tiny_checkpoint, judge={"actor_class": "memrl.engines.chat:NoSuchActor"})
    config.validate()
    with pytest.raises(ValueError, match=r"services.actors\['judge'\].actor_class=.*cannot import 'NoSuchActor'"):
        config.check_components()


def test_services_count_in_the_resources_and_the_trial_bundles(tmp_path):
    config = _config(tmp_path, judge={"actor_class": CHAT, "num_cpus": 2, "num_gpus": 0.5,
                                      "resources": {"judge_node": 1}})
    needs, parts = config.resources()
    assert needs == {"CPU": 4.0, "GPU": 0.5, "judge_node": 1.0}  # learner, engine and the judge's two
    assert parts[-1] == "1 service judge x (2 CPU, 0.5 GPU, 1 judge_node)"
    bundles, taken = config.trial_bundles()
    assert bundles[taken["service judge"][0]] == {"CPU": 2.0, "GPU": 0.5, "judge_node": 1}
    # Round trip through the config's dict form (a Tune param_space).
    assert DAPOConfig.from_dict(config.to_dict()).services_cfg.specs() == config.services_cfg.specs()


def test_env_options_naming_a_service_point_at_the_actor_it_runs_as():
    names = {"judge": "judge.trial1", "answerer": "answerer"}
    options = {"answerer": "actor:judge", "answer_judge": "actor:answerer", "k": 3, "other": "actor:judge2"}
    assert point_at(options, names) == {"answerer": "actor:judge.trial1", "answer_judge": "actor:answerer", "k": 3,
                                        "other": "actor:judge2"}


def test_services_start_answer_and_stop(ray_session, tiny_checkpoint, actor_gone):
    specs = {"judge": ServiceConfig(CHAT, {"model_path": str(tiny_checkpoint), "max_tokens": 3}, num_cpus=0.5)}
    handles = start_services(specs, {"judge": "judge-under-test"}, lambda *_: None, timeout_s=120)
    try:
        actor = ray_session.get_actor("judge-under-test")
        (reply,) = ray_session.get(actor.answer.remote([[{"role": "user", "content": "hello"}]]), timeout=60)
        assert isinstance(reply, str)
    finally:
        stop_services(handles)
    assert actor_gone("judge-under-test")

