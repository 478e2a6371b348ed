"""Each tensor program's scenario at 8 devices and 2 rounds (MLP on 16 synthetic samples a device): a case of
the fast tier for both engines (``test_outputs_contract``, ``tests/maths/test_messages``).

Every protocol that names a tensor program (``Protocol.tensor_program``) has its entry in ``PROGRAM_SETS``
(``test_every_tensor_program_is_in_the_contract``): a new program joins the outputs contract and the agreement
tests by a line here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from p2pfl.protocols.base import Protocol

BASE = "scenarios/bench/scale.yaml"  # MLP on 16 synthetic samples a device
SMALL = ["topology.n=8", "topology.radius=0.6", "protocol.rounds=2", "protocol.eval_every=1", "executor=inline"]
SERVER = ["topology.servers=[{attach: all, egress_bps: 1.0e9}]"]
NO_GOSSIP = ["protocol.mode", "protocol.exchange"]
#: each program's scenario: overrides and fields removed
PROGRAM_SETS: dict[str, tuple[list[str], list[str]]] = {
    "gossip": ([], []),
    "dsgd": (["protocol.name=dsgd"], NO_GOSSIP),
    "fedavg": (["protocol.name=fedavg", *SERVER], NO_GOSSIP),
    "ifca": (["protocol.name=ifca", "protocol.n_clusters=2", "protocol.balanced_init=true",
              "data.partition={kind: parameter_shift, n_clusters: 2, n_features: 10}", *SERVER], NO_GOSSIP),
    "oracle": (["protocol.name=oracle", "data.partition={kind: parameter_shift, n_clusters: 2, n_features: 10}",
                *SERVER], NO_GOSSIP),
    "local": (["protocol.name=local"], NO_GOSSIP),
    "dac": (["protocol.name=dac", "protocol.top_k=2",
             "data.partition={kind: parameter_shift, n_clusters: 2, n_features: 10}"], NO_GOSSIP),
    "rnd_gossip": (["protocol.name=rnd_gossip", "protocol.alpha=0.05",
                    "data.partition={kind: parameter_shift, n_clusters: 2, n_features: 10}"], []),
}


def overrides(program: str, engine: str, extra: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """``program``'s overrides under ``engine`` (with ``extra``) and the fields it removes."""
    sets, unset = PROGRAM_SETS[program]
    return [*SMALL, *sets, f"engine={engine}", *extra], unset


def declared_programs() -> dict[str, set[str]]:
    """YAML name -> the tensor programs its classes in the package name (the name's variants included; a name
    none of whose classes has a program is left out)."""
    found: dict[str, set[str]] = {}
    for family in ("serverless", "server", "reference"):
        package = importlib.import_module(f"p2pfl.protocols.{family}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Protocol) and cls.__module__ == module.__name__ and cls.tensor_program:
                    found.setdefault(cls.name, set()).add(cls.tensor_program)
    return found
