"""Registries: the parts a config names, one registry per kind, open to code outside memrl.

Each kind of part has one `Registry`: workflows (context policies, memrl.workflows), inference engines
(memrl.engines), advantage estimators and reward shapers (memrl.learner.advantages), loss aggregations
(memrl.learner.losses). A part is registered with the registry's decorator, as gymnasium registers envs:

    from memrl.workflows import WORKFLOWS, Workflow

    @WORKFLOWS.register("my_policy")
    class MyPolicy(Workflow):
        ...

and a config names it by that name, or by "module:Name" (which imports `module` wherever the part is needed, so a
part needs no registration at all). A name not registered yet loads the plugins first (memrl.plugins): a package
that declares its module in the `memrl.plugins` entry points has its parts found by name in every process.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Parts of one kind by name. An entry is the part itself or a "module:attribute" string imported when first
    asked for (engines register so, to keep vLLM out of processes that never use it)."""

    def __init__(self, kind: str, setting: str):
        """`kind` names the parts in errors ("workflow"); `setting` is the config setting that names one."""
        self.kind, self.setting = kind, setting
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, part: T | str | None = None):
        """Register `part` as `name`; without `part`, a decorator that registers what it decorates. A name is
        registered once: a second part under it is an error (a plugin must not silently replace a built-in)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.kind} name must be a non-empty string without ':'; got {name!r}")

        def add(item: T | str) -> T | str:
            known = self._entries.get(name)
            if known is not None and known is not item:
                raise ValueError(f"{self.kind} {name!r} is already registered ({_describe(known)}); choose "
                                 f"another name for {_describe(item)}")
            self._entries[name] = item
            return item

        return add(part) if part is not None else add

    def get(self, name: str) -> T:
        """The part registered as `name`, or the attribute "module:Name" names; a ValueError naming the setting
        and the registered names otherwise."""
        if not isinstance(name, str):
            raise ValueError(f"{self.setting}={name!r} is not allowed; name a {self.kind} by a string: one of "
                             f"{self.names()} or 'module:Name'")
        if ":" in name:
            return resolve(name, f"{self.setting}={name!r}")
        if name not in self._entries:
            from memrl.plugins import load_plugins

            load_plugins()
        if name not in self._entries:
            raise ValueError(f"{self.setting}={name!r} is not registered; choose one of {self.names()} or name one "
                             f"as 'module:Name'")
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = resolve(entry, f"{self.kind} {name!r}")
        return entry

    def check(self, name: str) -> None:
        """`get` without importing a lazily registered part: the ValueError alone."""
        if isinstance(name, str) and ":" not in name and name in self._entries:
            return
        self.get(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self.names())


def resolve(path: str, where: str) -> Any:
    """The attribute "module:Name" names, or a ValueError prefixed by `where` saying why it cannot be imported."""
    module, _, attribute = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{where}: cannot import {attribute!r} from module {module!r} ({exc})") from exc


def _describe(item: Any) -> str:
    if isinstance(item, str):
        return item
    return f"{getattr(item, '__module__', '?')}:{getattr(item, '__qualname__', item)}"
