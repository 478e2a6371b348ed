"""``extends:`` in scenario files: deep merge over bases, chains, cycles, paths and error naming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import p2pfl
from p2pfl.config import load, load_dict
from p2pfl.errors import ConfigError

BASE: dict[str, Any] = {
    "name": "base",
    "seed": 0,
    "topology": {"kind": "ring", "n": 5, "link": {"latency_s": 0.02, "bandwidth_bps": 1.0e7}},
    "data": {"dataset": "digits", "partition": {"kind": "iid"}, "samples_per_client": 20},
    "model": {"name": "mlp", "hidden": 8},
    "training": {"epochs": 1, "batch_size": 16, "lr": 0.05},
    "protocol": {"name": "gossip", "rounds": 2, "exchange": "push"},
}


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _error(path: Path, **kw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_mappings_merge_other_values_replace_and_null_removes(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE)
    child = _write(tmp_path / "child.yaml", {
        "extends": "base.yaml",
        "name": "child",
        "topology": {"n": 7, "link": {"latency_s": 0.5}},            # merged key by key
        "data": {"partition": {"kind": "dirichlet", "alpha": 0.3}},  # partition merged: kind replaced
        "protocol": {"exchange": None, "mode": "async"},             # exchange removed: the default again
    })
    sc = load(child)
    assert sc.name == "child" and sc.topology.n == 7 and sc.topology.kind == "ring"
    assert sc.topology.link.latency_s == 0.5 and sc.topology.link.bandwidth_bps == 1.0e7
    assert sc.data.partition.kind == "dirichlet" and sc.data.samples_per_client == 20
    assert sc.protocol.exchange == "push_pull" and sc.protocol.mode == "async" and sc.protocol.rounds == 2


def test_a_list_of_bases_applies_in_order_and_chains_are_followed(tmp_path: Path) -> None:
    _write(tmp_path / "root.yaml", BASE)
    _write(tmp_path / "mid.yaml", {"extends": "root.yaml", "protocol": {"rounds": 3}, "model": {"hidden": 12}})
    _write(tmp_path / "more.yaml", {"protocol": {"rounds": 4}, "description": "more"})
    child = _write(tmp_path / "child.yaml", {"extends": ["mid.yaml", "more.yaml"], "seed": 5})
    sc = load(child)
    assert sc.protocol.rounds == 4 and sc.model.hidden == 12 and sc.description == "more" and sc.seed == 5
    assert load(child, overrides=["protocol.rounds=6"], seed=2).protocol.rounds == 6


def test_lists_replace_rather_than_merge(tmp_path: Path) -> None:
    base = {**BASE, "topology": {**BASE["topology"], "servers": [{"name": "a"}, {"name": "b"}]}}
    _write(tmp_path / "base.yaml", base)
    child = _write(tmp_path / "child.yaml", {"extends": "base.yaml", "topology": {"servers": [{"name": "c"}]}})
    assert [s.name for s in load(child).topology.servers] == ["c"]


def test_a_cycle_is_refused_with_one_line_naming_the_chain(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", {"extends": "b.yaml"})
    _write(tmp_path / "b.yaml", {"extends": "c.yaml"})
    _write(tmp_path / "c.yaml", {"extends": "a.yaml"})
    msg = _error(tmp_path / "a.yaml")
    assert "cycle" in msg and "a.yaml -> " in msg and "b.yaml -> " in msg and "c.yaml -> " in msg
    assert msg.count("a.yaml") >= 2
    _write(tmp_path / "self.yaml", {"extends": "self.yaml"})
    assert "cycle" in _error(tmp_path / "self.yaml")


def test_a_diamond_is_not_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path / "root.yaml", BASE)
    _write(tmp_path / "left.yaml", {"extends": "root.yaml", "seed": 1})
    _write(tmp_path / "right.yaml", {"extends": "root.yaml", "name": "right"})
    sc = load(_write(tmp_path / "child.yaml", {"extends": ["left.yaml", "right.yaml"]}))
    assert sc.name == "right" and sc.seed == 0  # right re-applies root's seed after left's


def test_base_paths_are_relative_to_the_naming_file_then_to_the_cwd(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path / "bases" / "base.yaml", BASE)
    _write(tmp_path / "bases" / "mid.yaml", {"extends": "base.yaml", "seed": 3})  # next to mid.yaml
    child = _write(tmp_path / "runs" / "child.yaml", {"extends": "../bases/mid.yaml"})
    assert load(child).seed == 3
    cwd_child = _write(tmp_path / "elsewhere" / "child.yaml", {"extends": "bases/mid.yaml"})
    monkeypatch.chdir(tmp_path)
    assert load(cwd_child).seed == 3


def test_a_topology_file_in_a_base_resolves_relative_to_the_base(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path / "lib" / "ring7.yaml", {"kind": "ring", "n": 7})
    _write(tmp_path / "lib" / "graph.edges", "0 1\n1 2\n2 0\n")
    _write(tmp_path / "lib" / "base.yaml", {**BASE, "topology": "ring7.yaml"})
    _write(tmp_path / "lib" / "edges.yaml", {**BASE, "topology": {"kind": "edge_list", "path": "graph.edges"}})
    child = _write(tmp_path / "work" / "child.yaml", {"extends": "../lib/base.yaml"})
    monkeypatch.chdir(tmp_path)  # neither the child's folder nor the cwd holds ring7.yaml: the base's does
    assert load(child).topology.n == 7
    assert load(child, overrides=["topology.n=9"]).topology.n == 9  # edits the base's topology file content
    edges = load(_write(tmp_path / "work" / "edges.yaml", {"extends": "../lib/edges.yaml"})).topology
    assert Path(str(edges.path)) == (tmp_path / "lib" / "graph.edges").resolve()


def test_load_dict_resolves_extends_against_base_dir(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE)
    sc = load_dict({"extends": "base.yaml", "protocol": {"rounds": 9}}, base_dir=tmp_path)
    assert sc.protocol.rounds == 9 and sc.topology.n == 5
    with pytest.raises(ConfigError, match=r"^mine: field 'extends': base file 'nothere.yaml' not found"):
        load_dict({"extends": "nothere.yaml"}, source="mine", base_dir=tmp_path)


@pytest.mark.parametrize("value,rule", [
    ("missing.yaml", "base file 'missing.yaml' not found"),
    ("sub", "is a directory"),
    ("", "empty file name"),
    (7, "expected a file name or a non-empty list of file names; got 7"),
    ([], "expected a file name or a non-empty list"),
    ({"a": 1}, "expected a file name"),
    pytest.param("x" * 5000, "as a file name", id="name-too-long"),
])
def test_a_bad_extends_is_one_line_naming_the_file(tmp_path: Path, value: Any, rule: str) -> None:
    (tmp_path / "sub").mkdir()
    child = _write(tmp_path / "child.yaml", {"extends": value})
    msg = _error(child)
    assert msg.startswith(f"{child}: field 'extends': ") and rule in msg


def test_errors_in_a_base_name_the_base(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.yaml", {**BASE, "training": {"lr": -1}})
    child = _write(tmp_path / "child.yaml", {"extends": "base.yaml"})
    assert _error(child).startswith(f"{base} (base of {child}): field 'training.lr': ")
    # a value the child itself (or the command line) writes is the child's
    assert _error(child, overrides=["training.lr=-2"]).startswith(f"{child}: field 'training.lr': ")
    _write(tmp_path / "typo.yaml", {**BASE, "modle": {}})
    assert _error(_write(tmp_path / "c2.yaml", {"extends": "typo.yaml"})).startswith(
        f"{tmp_path / 'typo.yaml'} (base of {tmp_path / 'c2.yaml'}): unknown field 'modle'")
    broken = _write(tmp_path / "broken.yaml", "name: [\n")
    msg = _error(_write(tmp_path / "c3.yaml", {"extends": "broken.yaml"}))
    assert msg.startswith(f"{broken} (base of {tmp_path / 'c3.yaml'}): invalid YAML")
    _write(tmp_path / "nolist.yaml", "- a\n- b\n")
    assert "expected a mapping" in _error(_write(tmp_path / "c4.yaml", {"extends": "nolist.yaml"}))
    _write(tmp_path / "inline.yaml", {**BASE, "topology": {"kind": "ring", "n": -4}})
    msg = _error(_write(tmp_path / "c6.yaml", {"extends": "inline.yaml"}))
    assert msg.startswith(f"{tmp_path / 'inline.yaml'} (base of {tmp_path / 'c6.yaml'}): field 'topology.n': ")
    c7 = _write(tmp_path / "c7.yaml", {"extends": "base.yaml", "training": {"lr": 0.1}, "topology": {"n": -3}})
    assert _error(c7).startswith(f"{c7}: field 'topology.n': ")  # the child's edit of the base's topology
    _write(tmp_path / "badtopo.yaml", {**BASE, "topology": "nothere.yaml"})
    msg = _error(_write(tmp_path / "c5.yaml", {"extends": "badtopo.yaml"}))
    assert msg.startswith(f"{tmp_path / 'badtopo.yaml'} (base of ") and "topology file 'nothere.yaml' not found" in msg


def test_parameters_a_base_set_for_another_protocol_are_named(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", {**BASE, "protocol": {"name": "fedprox", "rounds": 2, "mu": 0.1}})
    child = _write(tmp_path / "child.yaml", {"extends": "base.yaml", "protocol": {"name": "gossip"}})
    msg = _error(child)
    assert msg.startswith(f"{child}: field 'protocol': protocol 'gossip' has no parameter 'mu' (set in ")
    assert "mu: ~" in msg and "--unset protocol.mu" in msg
    ok = _write(tmp_path / "ok.yaml", {"extends": "base.yaml", "protocol": {"name": "gossip", "mu": None}})
    assert load(ok).protocol.name == "gossip"
    assert load(child, unset=["protocol.mu"]).protocol.name == "gossip"


def test_the_run_directory_holds_the_merged_scenario_that_reruns_alone(tmp_path: Path) -> None:
    _write(tmp_path / "lib" / "ring4.yaml", {"kind": "ring", "n": 4})
    _write(tmp_path / "lib" / "base.yaml", {**BASE, "topology": "ring4.yaml"})
    child = _write(tmp_path / "child.yaml", {"extends": "lib/base.yaml", "protocol": {"rounds": 1}})
    result = p2pfl.run(child, out=tmp_path / "run")
    written = yaml.safe_load((tmp_path / "run" / "scenario.yaml").read_text(encoding="utf-8"))
    assert "extends" not in written and written["topology"]["n"] == 4 and written["protocol"]["rounds"] == 1
    again = tmp_path / "elsewhere" / "scenario.yaml"
    _write(again, written)
    assert load(again) == result.scenario
