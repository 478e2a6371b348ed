"""Which engine runs a scenario (``engine:``): the event kernel (``p2pfl.sim``: SimPy processes and messages per
device) or the tensor engine (``p2pfl.tensor``: the fleet as arrays, each round its protocol's tensor program)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from p2pfl.sim.kernel import Simulation
from p2pfl.sim.kernel import build_only as build_events
from p2pfl.tensor.simulation import TensorSimulation

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.config.scenario import Scenario

__all__ = ["make_simulation", "build_only", "AnySimulation"]

AnySimulation = Union[Simulation, TensorSimulation]


def make_simulation(sc: Scenario, *, on_round: Optional[Callable[[], None]] = None,
                    on_setup: Optional[Callable[[str], None]] = None, events_path: Optional[Path] = None,
                    cores: Optional[int] = None, evaluations: Optional[Path] = None) -> AnySimulation:
    """The built simulation of ``sc`` under its engine (``cores``: the event kernel's executor's share;
    ``evaluations``: its evaluation folder, ``p2pfl.sim.evaluations``; the tensor engine runs no scoring job)."""
    if sc.engine == "tensor":
        return TensorSimulation(sc, on_round=on_round, on_setup=on_setup, events_path=events_path)
    return Simulation(sc, on_round=on_round, on_setup=on_setup, events_path=events_path, cores=cores,
                      evaluations=evaluations)


def build_only(sc: Scenario) -> AnySimulation:
    """Build ``sc`` as a run would (every check a run makes), without running it and without workers."""
    return TensorSimulation(sc) if sc.engine == "tensor" else build_events(sc)
