"""The registry: the table matches the package's files; user protocols load by 'module:Class'."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
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


@pytest.mark.slow
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


def _installed_plugin(tmp_path: Path) -> Path:
    """A distribution on sys.path that registers the example protocol under the entry-point group."""
    dist = tmp_path / "fanout_example-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fanout-example\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[p2pfl.protocols]\nfanout = fanout_gossip:FanoutGossip\n",
                                           encoding="utf-8")
    return tmp_path


def test_a_protocol_registered_by_an_entry_point_runs_from_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # in-process through main(): the entry point is found on sys.path as an installed distribution's would be
    # (tests/e2e/test_cli_errors.py runs the real `python -m p2pfl` once)
    from p2pfl.cli import main

    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(_installed_plugin(tmp_path / "site")))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["run", str(EXAMPLE / "scenario.yaml"), "--set", "protocol.name=fanout", "--set", "protocol.rounds=2",
                 "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == "fanout_gossip" and summary["messages_total"] == 2 * 8 * 2
    capsys.readouterr()
    assert main(["list", "protocols"]) == 0
    assert any(line.startswith("fanout ") for line in capsys.readouterr().out.splitlines())


def test_a_user_model_named_by_import_path_is_built_and_trained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sc = digits_scenario({"name": "local", "rounds": 2}, n=3,
                         model={"name": "example_models:two_layer", "options": {"width": 12}})
    result = p2pfl.run(sc, write=False)
    params = 64 * 12 + 12 + 12 * 10 + 10  # 8x8 digits flattened -> 12 tanh units -> 10 classes
    update_bytes = 4 * params
    assert result.compute_flops_total > 0 and result.accuracy_mean is not None
    fedavg = p2pfl.run(digits_scenario({"name": "fedavg", "rounds": 1}, n=3, servers=True,
                                       model={"name": "example_models:two_layer", "options": {"width": 12}}),
                       write=False)
    assert fedavg.bytes_by_kind["update"] == 3 * (update_bytes + 8 + 64)  # state + n_samples + header


@pytest.mark.parametrize("model, fix", [
    ({"name": "no_such_mod_q:build"}, "cannot import 'no_such_mod_q'"),
    ({"name": "example_models:nothing"}, "module 'example_models' has no 'nothing'"),
    ({"name": "resnet"}, "unknown model 'resnet'"),
    ({"name": "mlp", "options": {"width": 3}}, "model.options is for user models"),
])
def test_bad_model_names_are_one_line_errors(monkeypatch: pytest.MonkeyPatch, model: dict, fix: str) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    with pytest.raises(ConfigError) as err:
        load_dict(digits_scenario({"name": "local", "rounds": 1}, model=model))
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_a_user_dataset_named_by_import_path_is_partitioned_and_trained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sc = digits_scenario({"name": "fedavg", "rounds": 3}, n=4, servers=True,
                         data={"dataset": "example_data:iris", "partition": {"kind": "iid"}})
    result = p2pfl.run(sc, write=False)
    assert result.partition["input_shape"] == [4] and result.partition["num_classes"] == 3
    assert sum(result.partition["samples_per_device"]) == 120  # the 4/5 of 150 flowers not held out
    assert result.accuracy_mean > 0.6


def test_bad_user_datasets_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name, fix in [("no_such_mod_q:load", "cannot import 'no_such_mod_q'"),
                      ("example_data:nothing", "module 'example_data' has no 'nothing'"),
                      ("irises", "unknown dataset 'irises'")]:
        with pytest.raises(ConfigError) as err:
            load_dict(digits_scenario({"name": "local", "rounds": 1}, data={"dataset": name}))
        assert fix in str(err.value) and "field 'data.dataset'" in str(err.value) and "\n" not in str(err.value)
