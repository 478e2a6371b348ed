"""Configuration: YAML -> validated, frozen pydantic models.

``load`` / ``load_dict`` / ``Scenario`` are imported lazily, so that
``import p2pfl.config`` costs nothing. Every package's own schema builds on
the leaf module ``p2pfl.validation`` (``Strict``, one-line errors) and
``p2pfl.limits`` (size limits); the scenario imports those schemas.
"""

from typing import Any

__all__ = ["Scenario", "load", "load_dict"]


def __getattr__(name: str) -> Any:
    if name in ("load", "load_dict"):
        from p2pfl.config import loader as _load

        return getattr(_load, name)
    if name == "Scenario":
        from p2pfl.config.scenario import Scenario

        return Scenario
    raise AttributeError(name)
