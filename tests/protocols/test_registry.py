"""The registry: the table matches the package's files; user protocols load by 'module:Class'."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import p2pfl
from p2pfl.config import load, load_dict
from p2pfl.errors import ConfigError
from p2pfl.protocols import Protocol
from p2pfl.registry import BUILTIN, get_protocol
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_protocol"


def _discovered() -> dict[str, set[type[Protocol]]]:
    """YAML name -> the protocol classes in the package's files that declare it."""
    found: dict[str, set[type[Protocol]]] = {}
    for family in ("serverless", "server", "reference"):
        package = importlib.import_module(f"p2pfl.protocols.{family}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Protocol) and cls.__module__ == module.__name__ and "name" in cls.__dict__:
                    found.setdefault(cls.name, set()).add(cls)
    return found


def test_the_table_lists_every_protocol_class_in_the_package() -> None:
    found = _discovered()
    assert sorted(BUILTIN) == sorted(found)
    for name in BUILTIN:
        assert get_protocol(name) in found[name] or get_protocol(name).name == name


def test_protocol_modules_never_reach_into_the_simulation() -> None:
    """No ``self.sim``, no ``Simulation`` and no kernel import in protocol code (docstrings aside)."""
    offenders = []
    for path in (ROOT / "p2pfl" / "protocols").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            bad = ((isinstance(node, ast.Attribute) and node.attr == "sim")
                   or (isinstance(node, ast.Name) and node.id == "Simulation")
                   or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("p2pfl.sim.kernel")))
            if bad:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("name, fix", [
    (["gossip"], "expected a protocol name"),
    ({"a": 1}, "expected a protocol name"),
    ("gosip", "unknown protocol 'gosip'"),
    ("no_such_module_xyz:Thing", "cannot import 'no_such_module_xyz'"),
    ("p2pfl.learning.aggregate:weighted_average", "does not name a Protocol subclass"),
])
def test_bad_protocol_names_are_one_line_errors(name: object, fix: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_protocol(name, "s.yaml")  # type: ignore[arg-type]
    msg = str(err.value)
    assert msg.startswith("s.yaml: field 'protocol.name': ") and fix in msg and "\n" not in msg


def test_a_user_protocol_outside_the_package_runs_from_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sc = load(EXAMPLE / "scenario.yaml", overrides=["protocol.rounds=3"])
    assert type(sc.protocol).__name__ == "FanoutParams" and sc.protocol.fanout == 2  # type: ignore[attr-defined]
    a = p2pfl.run(sc, write=False)
    b = p2pfl.run(sc, write=False)
    assert a.summary == b.summary
    assert a.protocol == "fanout_gossip" and a.messages_total == 3 * 8 * 2
    assert a.accuracy_mean > 0.5


def test_user_params_are_validated_like_builtin_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sc = digits_scenario({"name": "fanout_gossip:FanoutGossip", "rounds": 1, "fanout": 0})
    with pytest.raises(ConfigError, match=r"field 'protocol.fanout'"):
        load_dict(sc)
