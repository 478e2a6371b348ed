"""Protocols and the registry mapping YAML names to classes.

Every module under ``serverless/``, ``server/`` and ``reference/`` is imported
once; each ``Protocol`` subclass with a ``name`` is registered under it. Adding a
protocol is adding one file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from p2pfl.errors import ConfigError
from p2pfl.protocols.base import Protocol, ProtocolParams

__all__ = ["Protocol", "ProtocolParams", "PROTOCOLS", "get_protocol"]

_FAMILIES = ("serverless", "server", "reference")


def _discover() -> dict[str, type[Protocol]]:
    found: dict[str, type[Protocol]] = {}
    for family in _FAMILIES:
        package = importlib.import_module(f"{__name__}.{family}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Protocol) and cls.__module__ == module.__name__ and "name" in cls.__dict__:
                    if cls.name in found and found[cls.name] is not cls:
                        raise RuntimeError(f"two protocols are named {cls.name!r}: {found[cls.name]} and {cls}")
                    found[cls.name] = cls
    return dict(sorted(found.items()))


PROTOCOLS: dict[str, type[Protocol]] = _discover()


def get_protocol(name: str, source: str = "scenario") -> type[Protocol]:
    """The protocol class registered as ``name``; ConfigError listing valid names otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        valid = ", ".join(sorted(PROTOCOLS))
        raise ConfigError(f"{source}: field 'protocol.name': unknown protocol {name!r}; choose one of: {valid}") from None
