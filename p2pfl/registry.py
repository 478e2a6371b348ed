"""The protocol registry: YAML name -> protocol class, imported only when asked for.

Looking a name up imports that one protocol's module and nothing else, so
validating a scenario never pulls in the other protocols (scikit-learn,
robotics, MuJoCo). User protocols living outside this package (subclasses of
``Protocol``) are found two ways: a name of the form ``package.module:Class``,
or a plain name that an installed distribution registers under the entry-point
group ``p2pfl.protocols`` (``[project.entry-points."p2pfl.protocols"]
my_gossip = "mypkg.protocols:MyGossip"`` in its pyproject.toml). The table is
checked against the package's files by ``tests/protocols/test_registry.py``.
Datasets, partition kinds and models plug in the same way (``p2pfl.plugins``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from p2pfl.errors import ConfigError
from p2pfl.plugins import GROUPS, import_object, registered

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.protocols.base import Protocol

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "get_protocol", "all_protocols", "plugin_protocols"]

#: Entry-point group through which installed distributions register protocols.
ENTRY_POINT_GROUP = GROUPS["protocols"]

#: Built-in protocols: YAML name -> "module:Class".
BUILTIN: dict[str, str] = {
    "centralized": "p2pfl.protocols.reference.centralized:Centralized",
    "conditional": "p2pfl.protocols.server.conditional:Conditional",
    "dac": "p2pfl.protocols.serverless.dac:DAC",
    "ditto": "p2pfl.protocols.server.ditto:Ditto",
    "dsgd": "p2pfl.protocols.serverless.dsgd:DSGD",
    "fedavg": "p2pfl.protocols.server.fedavg:FedAvg",
    "feddrman": "p2pfl.protocols.server.feddrman:FedDRMan",
    "fedkd": "p2pfl.protocols.server.fedkd:FedKD",
    "fedprox": "p2pfl.protocols.server.fedprox:FedProx",
    "gossip": "p2pfl.protocols.serverless.gossip:Gossip",
    "ifca": "p2pfl.protocols.server.ifca:IFCA",
    "local": "p2pfl.protocols.reference.local:Local",
    "oracle": "p2pfl.protocols.reference.oracle:Oracle",
    "rnd": "p2pfl.protocols.server.rnd:RND",
    "rnd_gossip": "p2pfl.protocols.serverless.rnd_gossip:RNDGossip",
}


def _load(target: str, name: str, source: str) -> type[Protocol]:
    from p2pfl.protocols.base import Protocol

    try:
        cls = import_object(target)
    except ValueError as err:
        raise ConfigError(f"{source}: field 'protocol.name': {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise ConfigError(f"{source}: field 'protocol.name': {name!r} does not name a Protocol subclass; "
                          "give 'package.module:ClassName' of a class deriving from p2pfl.protocols.Protocol")
    return cls


def get_protocol(name: str, source: str = "scenario") -> type[Protocol]:
    """The protocol class for ``name`` (a built-in name, or ``module:Class``); ConfigError otherwise."""
    if not isinstance(name, str):
        raise ConfigError(f"{source}: field 'protocol.name': expected a protocol name (a string); "
                          f"got {name!r}; choose one of: {', '.join(BUILTIN)}")
    if name in BUILTIN:
        return _load(BUILTIN[name], name, source)
    if ":" in name:
        return _load(name, name, source)
    plugins = plugin_protocols()
    if name in plugins:
        return _load(plugins[name], name, source)
    raise ConfigError(f"{source}: field 'protocol.name': unknown protocol {name!r}; choose one of: "
                      f"{', '.join([*BUILTIN, *plugins])} (or 'package.module:Class' for your own)")


def plugin_protocols() -> dict[str, str]:
    """Protocols registered by installed distributions: name -> ``module:Class`` (built-in names win)."""
    return {name: target for name, target in registered(ENTRY_POINT_GROUP).items() if name not in BUILTIN}


def all_protocols() -> dict[str, type[Protocol]]:
    """Every built-in and registered protocol class by name (imports them all: for listings only)."""
    return {name: get_protocol(name) for name in [*BUILTIN, *plugin_protocols()]}
