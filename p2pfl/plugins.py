"""User code named in YAML by import path (``package.module:name``), and plug-ins registered by name.

A plug-in adds YAML names to p2pfl: datasets, partition kinds, models and protocols. An installed
distribution registers each under an entry-point group of :data:`GROUPS` (in its pyproject.toml,
``[project.entry-points."p2pfl.partitions"] my_split = "mypkg.data:MySplit"``); p2pfl's own plug-in
domains register in :data:`BUILTIN`, in the same form, and are found by the same code. Robotics is
one: ``p2pfl.robotics`` adds the ``robotics`` dataset, the ``robot_suites`` partition kind and the
``robot_policy`` model here, and the core (kernel, data, models, executors) never imports it
(``tests/architecture/test_robotics_plugin.py``). A name is only a string until it is first used, so
validating a scenario imports the plug-ins it names and no other.

A leaf module (standard library only), so any package may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Generic, TypeVar

__all__ = ["GROUPS", "BUILTIN", "Registry", "import_object", "lookup", "registered"]

T = TypeVar("T")

#: Entry-point group of each kind of plug-in.
GROUPS = {"datasets": "p2pfl.datasets", "partitions": "p2pfl.partitions", "models": "p2pfl.models",
          "protocols": "p2pfl.protocols"}

#: Plug-in domains shipped with p2pfl, registered as a distribution's entry points are:
#: group -> YAML name -> ``module:object``. What each object is: see the group's reader
#: (``p2pfl.data.datasets.DATASET_INFO``, ``p2pfl.data.schema.PluginPartition``,
#: ``p2pfl.learning.models.build_model``).
BUILTIN: dict[str, dict[str, str]] = {
    "p2pfl.datasets": {"robotics": "p2pfl.robotics.schema:ROBOTICS"},
    "p2pfl.partitions": {"robot_suites": "p2pfl.robotics.schema:RobotSuitesPartition"},
    "p2pfl.models": {"robot_policy": "p2pfl.robotics.policy:robot_policy"},
}


def import_object(target: str) -> object:
    """The object that ``package.module:name`` names.

    Raises ValueError with a one-line reason and fix (the caller adds the file and field).
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r} is not an import path; write 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name!r} ({err}); check the module path and PYTHONPATH") from None
    if not hasattr(module, attr):
        raise ValueError(f"module {module_name!r} has no {attr!r}; check the name after the colon")
    return getattr(module, attr)


def registered(group: str) -> dict[str, str]:
    """The plug-ins of entry-point ``group``: YAML name -> ``module:object``, p2pfl's own (:data:`BUILTIN`)
    first, then installed distributions' (a name already taken keeps its first owner). Nothing is imported."""
    out = dict(BUILTIN.get(group, {}))
    for ep in entry_points(group=group):
        out.setdefault(ep.name, ep.value)
    return out


def lookup(group: str, name: str) -> str | None:
    """``module:object`` of plug-in ``name`` in ``group`` (p2pfl's own first; entry points are read only when
    it is not one of those), or None. Nothing is imported."""
    own = BUILTIN.get(group, {}).get(name)
    return own if own is not None else registered(group).get(name)


class Registry(Mapping[str, T], Generic[T]):
    """A table of built-in entries followed by the plug-ins of an entry-point group.

    Membership and iteration read names only; reading a plug-in's entry imports its object once and
    passes it through ``check(name, obj)``, which returns the entry or raises a one-line error.
    """

    def __init__(self, builtin: Mapping[str, T], group: str, check: Callable[[str, object], T]) -> None:
        self._builtin = dict(builtin)
        self._group = group
        self._check = check
        self._loaded: dict[str, T] = {}

    @property
    def builtin(self) -> Mapping[str, T]:
        """The built-in entries only (no plug-in is looked up)."""
        return self._builtin

    def plugins(self) -> dict[str, str]:
        """Plug-in names -> ``module:object`` (a name the built-ins take is left out)."""
        return {k: v for k, v in registered(self._group).items() if k not in self._builtin}

    def __getitem__(self, name: str) -> T:
        if not isinstance(name, str):
            raise KeyError(name)
        if name in self._builtin:
            return self._builtin[name]
        if name not in self._loaded:
            target = lookup(self._group, name)
            if target is None:
                raise KeyError(name)
            self._loaded[name] = self._check(name, import_object(target))
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._builtin or lookup(self._group, name) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter([*self._builtin, *self.plugins()])

    def __len__(self) -> int:
        return len(self._builtin) + len(self.plugins())
