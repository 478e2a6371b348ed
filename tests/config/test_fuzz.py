"""Seeded fuzz of scenario validation: every mutation of every shipped scenario either validates or
raises a UserError whose message is one line naming the file.

Mutations: delete a key, add an unknown key, replace a value by one of another type, by a
non-finite or huge number, by an edge value of its own type (-1, 0, -2^63, 2^64; -0.0, 1e-300),
by a path string (missing file, directory, device, binary file, a file that is not a scenario)
or by a nested mapping/list; or ``--set`` a field of the schema the file may not state
(``topology.seed``, a protocol parameter left at its default) to any of those values; sometimes
two or three at once. Each mutation is validated (``load_dict``) and, when valid, its topology is
built (cheap; it catches a value that validates but breaks the builder, as ``topology.seed: -1``
once did). No data is loaded.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from p2pfl.config import load_dict
from p2pfl.config.scenario import Scenario
from p2pfl.errors import UserError
from p2pfl.topology import build_topology

ROOT = Path(__file__).resolve().parents[2]
# scenarios/studies/ holds study files (sweeps over scenarios), not scenarios
SCENARIOS = sorted(p for p in (ROOT / "scenarios").glob("**/*.yaml")
                   if p.relative_to(ROOT / "scenarios").parts[0] != "studies")
PER_SCENARIO = 50
TOPOLOGY_FILES = sorted((ROOT / "topologies").glob("**/*.yaml"))

Path_ = tuple[Any, ...]


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every position inside ``node`` (keys of mappings, indices of lists), depth first."""
    out: list[Path_] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


def _containers(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Positions of every mapping inside ``node`` (the root included)."""
    out: list[Path_] = [prefix] if isinstance(node, dict) else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _containers(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _containers(v, (*prefix, i))
    return out


def _at(node: Any, path: Path_) -> Any:
    for p in path:
        node = node[p]
    return node


def _deep(levels: int) -> Any:
    node: Any = 1
    for i in range(levels):
        node = {"k": node} if i % 2 else [node]
    return node


def _values(extra_paths: list[str]) -> dict[str, list[Any]]:
    return {
        "type": ["text", "", 7, 0, -3, 2.5, True, False, None, [1, 2], [], {"k": 1}, {}],
        "nonfinite": [math.nan, math.inf, -math.inf],
        "huge": [10**12, -(10**12), 10**30, 2**63, 1e300, -1e300, 1e-300],
        "path": ["../topologies/ring16.yaml", "topologies/ring16.yaml", "/nonexistent/dir/x.yaml", "/", "/dev/null",
                 str(ROOT / "README.md"), str(ROOT / "topologies"), "~/nope.yaml", *extra_paths],
        "nested": [{"a": {"b": [1, {"c": None}]}}, [[1, [2, [3]]], {"x": {"y": "z"}}], _deep(40),
                   {"name": {"name": ["gossip"]}}, [{"kind": "ring", "n": 4}]],
        # same type as the value replaced, at its edges: what a type check lets through
        "edge_int": [-1, 0, 1, -(2**31), -(2**63), 2**63 - 1, 2**64],
        "edge_float": [-1.0, 0.0, -0.0, 1e-300, -1e-9, 1.0 - 1e-16, 1e15],
    }


def _schema_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of every field of a validated scenario's models, stated in the file or not (lists of models
    left out): what ``--set`` can reach."""
    out: list[str] = []
    for name, info in type(model).model_fields.items():
        path = f"{prefix}{name}"
        out.append(path)
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += _schema_fields(value, f"{path}.")
        elif value is None:  # an absent block (dynamics): its fields by class
            for arg in getattr(info.annotation, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    out += [f"{path}.{f}" for f in arg.model_fields]
    return out


def _yaml(value: Any) -> str:
    """``value`` as ``--set key=VALUE`` writes it (a YAML flow scalar or collection)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip().removesuffix("\n...").strip()


def _mutate(data: dict, rng: random.Random, values: dict[str, list[Any]],
            fields: list[str]) -> tuple[dict, list[str], list[str], list[str]]:
    """A mutated deep copy, what was done, the path strings put in, and ``--set`` overrides of schema ``fields``."""
    out = copy.deepcopy(data)
    done: list[str] = []
    used_paths: list[str] = []
    overrides: list[str] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.choice(("delete", "unknown", "type", "nonfinite", "huge", "edge", "path", "nested", "set", "set"))
        paths = _paths(out)
        if op == "set":  # a field of the schema, stated in the file or not, from the command line
            field = rng.choice(fields)
            pool = values[rng.choice(("edge_int", "edge_int", "edge_float", "type", "nonfinite", "huge"))]
            value = copy.deepcopy(rng.choice(pool))
            overrides.append(f"{field}={_yaml(value)}")
            done.append(f"--set {overrides[-1]:.60}")
            continue
        if op == "unknown" or not paths:
            where = rng.choice(_containers(out))
            value = rng.choice(values[rng.choice(("type", "nested"))])
            _at(out, where)[f"unknown_{rng.randrange(100)}"] = copy.deepcopy(value)
            done.append(f"add unknown key under {where}")
            continue
        path = rng.choice(paths)
        parent = _at(out, path[:-1])
        if op == "delete":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
            done.append(f"delete {path}")
            continue
        old = parent[path[-1]]
        if op == "edge":
            pool = values["edge_float" if isinstance(old, float) else "edge_int"]
        else:
            pool = values[op]
        if op == "type":
            pool = [v for v in pool if type(v) is not type(old)]
        value = copy.deepcopy(rng.choice(pool))
        if op == "path":
            used_paths.append(value)
        parent[path[-1]] = value
        done.append(f"{op} {path} = {value!r:.60}")
    return out, done, used_paths, overrides


def _raw(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def _check(data: dict, path: Path, what: str, named: list[str], overrides: Sequence[str] = ()) -> bool:
    """True if ``data`` validates (and its topology builds); a UserError must be one line naming ``path`` (or a
    file put in) when validating, one line when building."""
    try:
        sc = load_dict(data, source=str(path), base_dir=path.parent, overrides=overrides)
    except UserError as err:
        msg = str(err)
        assert "\n" not in msg and "\r" not in msg, f"{what}: {msg!r}"
        names = [str(path)] + [Path(p).name for p in named if Path(p).name]
        if overrides:  # a --set into a topology read from a file names that file (the one to fix)
            names += [str(p.relative_to(ROOT)) for p in TOPOLOGY_FILES]
        assert any(n in msg for n in names), f"{what}: message does not name the file: {msg!r}"
        return False
    except Exception as err:  # anything else escaping is the bug this test looks for
        pytest.fail(f"{path.name}: {what}: {type(err).__name__}: {err}")
    assert isinstance(sc, Scenario)
    if (sc.topology.n or 0) > 5_000:  # the bench fleets (10^4-10^6 devices) are built by analysis/bench/bench_scale.py,
        return True                    # not 50 times a file here (10^4: 0.05 s a graph; 10^6: half a minute)
    try:
        build_topology(sc.topology, seed=sc.seed, base_dir=path.parent)
    except UserError as err:
        assert "\n" not in str(err), f"{what}: building the topology: {err!r}"
    except Exception as err:
        pytest.fail(f"{path.name}: {what}: validated, then building the topology: {type(err).__name__}: {err}")
    return True


@pytest.fixture(scope="module")
def odd_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("odd")
    (folder / "random.bin").write_bytes(random.Random(1).randbytes(512))
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (folder / "latin1.yaml").write_bytes("kind: ring\nn: 4\nname: caf\xe9\n".encode("latin-1"))
    (folder / "empty.yaml").write_text("")
    (folder / "list.yaml").write_text("- ring\n- 4\n")
    (folder / "a_dir").mkdir()
    return [str(folder / n) for n in ("random.bin", "image.png", "latin1.yaml", "empty.yaml", "list.yaml", "a_dir")]


def test_every_shipped_scenario_is_fuzzed() -> None:
    assert len(SCENARIOS) >= 20
    assert len(SCENARIOS) * PER_SCENARIO >= 500


@pytest.mark.slow
def test_every_shipped_scenario_validates_unmutated() -> None:
    invalid = [p for p in SCENARIOS if not _check(_raw(p), p, "unmutated", [])]
    assert not invalid, invalid
    assert any("extends" in _raw(p) for p in SCENARIOS)  # files that extend a base are fuzzed too


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
@pytest.mark.slow
def test_mutations_validate_or_fail_with_one_line(path: Path, odd_files: list[str]) -> None:
    rng = random.Random(0)
    values = _values(odd_files)
    data = _raw(path)
    fields = _schema_fields(load_dict(data, source=str(path), base_dir=path.parent))
    outcomes = []
    for i in range(PER_SCENARIO):
        mutated, done, used, overrides = _mutate(data, rng, values, fields)
        outcomes.append(_check(mutated, path, f"mutation {i}: {'; '.join(done)}", used, overrides))
    assert not all(outcomes), "no mutation was refused: the fuzz is not biting"


def test_the_schema_fields_reach_what_a_file_leaves_out() -> None:
    """``--set`` mutations reach fields no shipped file states: the seeds of the topology and of the dynamics, and a
    protocol's parameters at their defaults."""
    quickstart = ROOT / "scenarios" / "quickstart.yaml"
    fields = _schema_fields(load_dict(_raw(quickstart), source=str(quickstart), base_dir=quickstart.parent))
    assert {"seed", "topology.seed", "topology.tries", "dynamics.seed", "protocol.wake_rate_hz",
            "training.lr", "data.partition.kind"} <= set(fields)
    assert "topology.seed" not in str(_raw(quickstart))


#: a topology from a file, dynamics, an inline random topology with a clustering protocol
EDGE_SCENARIOS = ["quickstart.yaml", "dynamics/churn_gossip.yaml", "headline/rnd_gossip_h1.yaml"]


@pytest.mark.parametrize("name", [n if n == "quickstart.yaml" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in EDGE_SCENARIOS])
@pytest.mark.slow
def test_every_schema_field_at_its_edges_validates_and_builds_or_is_one_line(name: str) -> None:
    """Not drawn at random: every field ``--set`` can reach, stated in the file or not, set to each edge value of
    the numbers (found ``--set topology.seed=-1``, which validated and then broke the topology builder)."""
    path = ROOT / "scenarios" / name
    data = _raw(path)
    fields = _schema_fields(load_dict(data, source=str(path), base_dir=path.parent))
    assert "topology.seed" in fields
    assert _yaml(-1) == "-1" and _yaml(math.nan) == ".nan" and _yaml([1, 2]) == "[1, 2]"
    for field in fields:
        for value in (-1, 0, -(2**63), 2**64, -1.0, math.nan):
            _check(data, path, f"--set {field}={_yaml(value)}", [], [f"{field}={_yaml(value)}"])


def test_fuzz_is_deterministic(odd_files: list[str]) -> None:
    values = _values(odd_files)
    data = _raw(SCENARIOS[0])
    fields = _schema_fields(load_dict(data, source=str(SCENARIOS[0]), base_dir=SCENARIOS[0].parent))
    runs = [[_mutate(data, random.Random(0), values, fields)[1] for _ in range(3)] for _ in range(2)]
    assert runs[0] == runs[1]
