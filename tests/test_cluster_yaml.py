"""cluster.yaml is a valid Ray cluster launcher file with a CPU head and a GPU worker type."""

from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import fillout_defaults, validate_config

CLUSTER_YAML = Path(__file__).parents[1] / "cluster.yaml"


def _load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_validates_against_ray_schema():
    validate_config(fillout_defaults(_load()))


def test_has_cpu_head_and_gpu_workers():
    config = _load()
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["node_config"]["InstanceType"].startswith("m")  # general-purpose CPU instance
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert any(t["node_config"]["InstanceType"].startswith(("p", "g")) for t in workers)  # GPU instance families


def test_schema_check_rejects_a_broken_file():
    import jsonschema

    config = _load()
    config["available_node_types"]["head"]["unknown_field"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_config(fillout_defaults(config))
