"""cluster.yaml is a valid Ray cluster launcher file: a CPU head and a GPU worker type, Ray's own AMI and container
image (nothing to look up by hand), nothing exposed beyond the head's loopback, and the cluster guide
(docs/guide/cluster.md) follows it."""

import re
from pathlib import Path

import pytest
import ray
import yaml
from ray.autoscaler._private.util import fillout_defaults, validate_config

ROOT = Path(__file__).parents[1]
CLUSTER_YAML = ROOT / "cluster.yaml"


def _load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def _rays_default_amis() -> dict[str, str]:
    """Ray's table of default AMIs by region, read from its AWS provider's source (importing it needs boto3)."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec("ray.autoscaler._private.aws").submodule_search_locations[0]) / "config.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["DEFAULT_AMI"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no DEFAULT_AMI in {source}")


def test_validates_against_ray_schema():
    validate_config(fillout_defaults(_load()))


def test_has_cpu_head_and_gpu_workers():
    config = _load()
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["node_config"]["InstanceType"].startswith("m")  # general-purpose CPU instance
    assert head["resources"] == {"head": 1}  # what resources_per_env_runner={"head": ...} asks for
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert any(t["node_config"]["InstanceType"].startswith(("p", "g")) for t in workers)  # GPU instance families


def test_images_are_rays_own():
    config = _load()
    # Ray substitutes its default Deep Learning AMI for the region: no AMI id to keep up to date.
    assert config["provider"]["region"] in _rays_default_amis()
    assert {t["node_config"]["ImageId"] for t in config["available_node_types"].values()} == {"latest_dlami"}
    assert "ami-" not in CLUSTER_YAML.read_text()
    # The container is Ray's image of the installed Ray version.
    assert re.fullmatch(rf"rayproject/ray:{re.escape(ray.__version__)}-py3\d+-gpu", config["docker"]["image"])
    assert config["setup_commands"] == ["cd ~/memrl && pip install -q -e '.[gpu]'"]


def test_nothing_listens_beyond_loopback_by_default():
    config = _load()
    text = CLUSTER_YAML.read_text()
    assert "0.0.0.0" not in text
    # `ray start` keeps the dashboard on 127.0.0.1 unless --dashboard-host says otherwise; `ray dashboard` forwards it.
    assert not any("--dashboard-host" in c for c in config["head_start_ray_commands"])


def test_the_cluster_guide_is_the_launcher_path():
    section = (ROOT / "docs" / "guide" / "cluster.md").read_text()
    for command in ("ray up cluster.yaml", "ray submit cluster.yaml tuned_examples/", "ray dashboard cluster.yaml",
                    "ray rsync-down cluster.yaml", "ray down cluster.yaml"):
        assert command in section, command


def test_schema_check_rejects_a_broken_file():
    import jsonschema

    config = _load()
    config["available_node_types"]["head"]["unknown_field"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_config(fillout_defaults(config))
