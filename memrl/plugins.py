"""Parts that live outside memrl's core: plugin modules, and envs made by gymnasium id once they are loaded.

A plugin is a module that registers parts when imported: its envs with `gymnasium.register`, and its workflows,
engines and other parts with memrl's registries. A package names its plugin modules in the `memrl.plugins`
entry-point group of its pyproject.toml, as memrl's sample envs do (`memrl_envs`):

    [project.entry-points."memrl.plugins"]
    my_package = "my_package.plugin"

Every process that makes envs (the driver, each env runner) loads the group once, so a bare id such as
"memrl/Search-v0" resolves the same everywhere. An env id may also name its module ("my_package.envs:MyEnv-v0",
gymnasium's own syntax), which imports that module first and needs no entry point.
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from typing import Any

PLUGIN_GROUP = "memrl.plugins"
"""The entry-point group of plugin modules."""
_lock = threading.Lock()
_loaded: list[str] | None = None


def load_plugins() -> list[str]:
    """Import every module of the `memrl.plugins` group once in this process; returns their names.

    A plugin that fails to import raises an ImportError naming the entry point and the package that declares it."""
    global _loaded
    with _lock:
        if _loaded is None:
            names = []
            for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
                try:
                    point.load()
                except Exception as exc:
                    owner = point.dist.name if point.dist is not None else "an installed package"
                    raise ImportError(f"memrl plugin {point.name!r} = {point.value!r} (declared by {owner} in the "
                                      f"{PLUGIN_GROUP!r} entry points) failed to import: {exc}") from exc
                names.append(point.value)
            _loaded = names
        return list(_loaded)


def make_env(env_id: str, env_config: dict[str, Any] | None = None):
    """`gymnasium.make(env_id, **env_config)` once the plugins are loaded."""
    import gymnasium

    load_plugins()
    return gymnasium.make(env_id, **(env_config or {}))
