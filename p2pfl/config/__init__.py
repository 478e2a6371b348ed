"""Configuration: YAML -> validated, frozen pydantic models.

``load`` / ``load_dict`` / ``Scenario`` are imported lazily, because every
package's own schema imports ``p2pfl.config.validation`` and the scenario
imports those schemas in turn.
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
