"""Bad input through the Python API: a one-line UserError naming the file, the field and the fix.

Cases: (1) unreadable files, (2) absurd sizes, (3) wrong types, (4) non-finite numbers,
(6) ``--set topology=FILE``, null / ``unset`` removals and leftover protocol keys.
Validation only: nothing here builds a topology or loads data.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

import p2pfl
from p2pfl import limits
from p2pfl.config import load, load_dict
from p2pfl.errors import ConfigError, UserError
from p2pfl.validation import read_yaml
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]


def _gossip(**extra: Any) -> dict[str, Any]:
    return digits_scenario({"name": "gossip", "rounds": 1}, **extra)


def _with(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node = data
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    return data


def _refused(data: Any, *patterns: str, source: str = "bad.yaml", named: str | None = None, **kw: Any) -> str:
    """The one-line message of the UserError ``load_dict`` raises, naming ``named`` (default: the source)."""
    with pytest.raises(UserError) as info:
        load_dict(data, source=source, **kw)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert (source if named is None else named) in msg, msg
    for pattern in patterns:
        assert pattern in msg, msg
    return msg


# --- 1. files that are not YAML scenarios ---------------------------------------


FILES: dict[str, tuple[bytes | None, str]] = {
    "random.bin": (bytes(range(256)) * 4, "binary data, not a YAML text file"),
    "image.png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "binary data, not a YAML text file"),
    "latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), "not a UTF-8 text file"),
    "empty.yaml": (b"", "the file is empty"),
    "comments.yaml": (b"# nothing but a comment\n", "the file is empty"),
    "list.yaml": (b"- 1\n- 2\n", "expected a mapping of scenario fields at the top level; got list"),
    "scalar.yaml": (b"5\n", "expected a mapping of scenario fields at the top level; got int"),
    "bad_scalar.yaml": (b"when: 2024-13-45\n", "invalid YAML value"),
    "deep.yaml": (b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested too deeply"),
    "loop.yaml": (b"a: &x [*x]\n", "invalid YAML"),
    "bomb.yaml": (b"a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                  b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
                  b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n", "expands to more than"),
    "a_dir": (None, "is a directory, not a YAML file"),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "deep.yaml" else n for n in sorted(FILES)])
def test_unreadable_scenario_files_are_one_line(tmp_path: Path, name: str) -> None:
    content, pattern = FILES[name]
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    for call in (lambda: load(path), lambda: p2pfl.run(path, out=tmp_path / "out")):
        with pytest.raises(UserError) as info:
            call()
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg, msg
        if name != "loop.yaml":  # PyYAML itself refuses the recursive alias: any one-line YAML error will do
            assert pattern in msg, msg
    assert not (tmp_path / "out").exists()


def test_empty_file_says_what_a_scenario_needs(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"empty\.yaml: the file is empty .*needs at least 'topology' and 'protocol'"):
        load(path)


@pytest.mark.parametrize("name", ["random.bin", "empty.yaml", "list.yaml", "a_dir"])
def test_unreadable_topology_files_are_one_line(tmp_path: Path, name: str) -> None:
    content, _ = FILES[name]
    target = tmp_path / name
    if content is None:
        target.mkdir()
    else:
        target.write_bytes(content)
    expected = {"random.bin": "binary data", "empty.yaml": "a topology needs 'kind'",
                "list.yaml": "expected a mapping of topology fields", "a_dir": "is a directory"}[name]
    named = str(tmp_path / "sc.yaml") if name == "a_dir" else str(target)  # the file to fix
    _refused(_gossip(topology=name), expected, base_dir=tmp_path, source=str(tmp_path / "sc.yaml"), named=named)
    if name != "a_dir":
        from p2pfl.topology import load_topology_file

        with pytest.raises(UserError, match=expected):
            load_topology_file(target)


def test_special_files_and_missing_files(tmp_path: Path) -> None:
    _refused(_gossip(topology="/dev/null"), "is not a regular file")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_yaml(Path("/dev/null"))
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found; check the path$"):
        load(tmp_path / "nope.yaml")


def test_too_large_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl import validation

    monkeypatch.setattr(validation, "MAX_YAML_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("name: x\n" * 20)
    with pytest.raises(ConfigError, match=r"big\.yaml: the file has 160 B, more than the 100 B"):
        read_yaml(path)


# --- 2. absurd sizes ---------------------------------------------------------------


SIZES: dict[str, tuple[str, Any, str]] = {
    "ring 10^9": ("topology", {"kind": "ring", "n": 10**9}, "field 'topology.n': at most 1,000,000 devices"),
    "ring 10^12": ("topology", {"kind": "ring", "n": 10**12}, "field 'topology.n': at most 1,000,000 devices"),
    "grid 10^6 x 10^6": ("topology", {"kind": "grid", "rows": 10**6, "cols": 10**6}, "rows * cols = 1,000,000,000,000"),
    "complete 10^6": ("topology", {"kind": "complete", "n": 10**6}, "links would need at least"),
    "erdos_renyi 10^6": ("topology", {"kind": "erdos_renyi", "n": 10**6, "p": 1e-5}, "at most 20,000 devices"),
    "k_regular k": ("topology", {"kind": "k_regular", "n": 6, "k": 10**12}, "field 'topology.k': at most"),
    "tries": ("topology", {"kind": "erdos_renyi", "n": 6, "p": 0.0, "tries": 10**12}, "field 'topology.tries': at most 10,000"),
    "samples_per_client": ("data.samples_per_client", 10**12, "field 'data.samples_per_client'"),
    "min_samples": ("data.partition", {"kind": "dirichlet", "min_samples": 10**12}, "field 'data.partition.min_samples'"),
    "n_clusters": ("data.partition", {"kind": "label_permutation", "n_clusters": 10**12}, "field 'data.partition.n_clusters'"),
    "n_features": ("data", {"dataset": "synthetic_linear", "partition": {"kind": "parameter_shift", "n_features": 10**12}},
                   "field 'data.partition.n_features'"),
    "synthetic test_fraction": ("data", {"dataset": "synthetic_linear", "test_fraction": 1 - 1e-12,
                                         "partition": {"kind": "parameter_shift", "n_clusters": 1}}, "too large for this machine"),
    "overlapping samples": ("data", {"dataset": "digits28", "samples_per_client": 10**7, "overlap": True},
                            "and 12,500,000 samples of 784 features each (data.overlap) would need at least"),
    "hidden": ("model.hidden", 10**12, "field 'model.hidden'"),
    "hidden 0": ("model.hidden", 0, "field 'model.hidden'"),
    "hidden x devices": ("topology", {"kind": "ring", "n": 10**6}, "too large for this machine"),
    "rounds": ("protocol.rounds", 10**12, "field 'protocol.rounds'"),
    "epochs": ("training.epochs", 10**12, "field 'training.epochs': at most 1,000,000"),
    "eval_every": ("protocol.eval_every", 10**12, "field 'protocol.eval_every': at most 1,000,000"),
    "threads": ("threads", 10**12, "field 'threads': at most 1,024"),
    "lognormal sigma": ("devices", {"flops_per_s": {"dist": "lognormal", "median": 1e9, "sigma": 1e6}},
                        "field 'devices.flops_per_s.sigma'"),
}


@pytest.mark.parametrize("case", sorted(SIZES))
def test_absurd_sizes_are_refused_before_anything_is_built(case: str) -> None:
    dotted, value, pattern = SIZES[case]
    data = _with(_gossip(), dotted, value)
    if case == "hidden x devices":
        data["model"]["hidden"] = limits.MAX_HIDDEN
    msg = _refused(data, pattern)
    assert "; " in msg.split(pattern, 1)[1], f"no fix after the rule: {msg}"


def test_memory_check_uses_this_machines_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _with(_gossip(), "topology", {"kind": "ring", "n": 100_000})
    assert load_dict(data).topology.n == 100_000  # 10^5 devices x a 1.2k-parameter MLP fit anywhere
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 500 * 2**20)  # the graph fits, the models do not
    _refused(data, "the scenario is too large for this machine: 100,000 devices with a mlp model of about 1,210 "
             "parameters would need at least", "more than the 500.0 MiB of this machine", "use fewer devices (topology n)",
             source="scenario")
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 2**20)
    _refused(data, "'topology': a ring topology of 100,000 devices", "1.0 MiB",
             source="scenario")


def test_machine_memory_is_known_here() -> None:
    mem = limits.machine_memory_bytes()
    assert mem is None or mem > 2**26


# --- 3. wrong types --------------------------------------------------------------------


TYPES: dict[str, tuple[str, Any, str]] = {
    "protocol name list": ("protocol", {"name": ["gossip"]}, "field 'protocol.name': expected a protocol name (a string)"),
    "protocol name mapping": ("protocol", {"name": {"a": 1}}, "field 'protocol.name': expected a protocol name"),
    "protocol name number": ("protocol", {"name": 5}, "field 'protocol.name': expected a protocol name"),
    "protocol number": ("protocol", 5, "field 'protocol': expected a mapping with a 'name'; got 5"),
    "protocol list": ("protocol", ["gossip"], "field 'protocol': expected a mapping"),
    "protocol missing name": ("protocol", {"rounds": 3}, "field 'protocol.name' is required"),
    "data list": ("data", [1, 2], "field 'data': Input should be a valid dictionary"),
    "topology number": ("topology", 3, "field 'topology': expected a file path or a mapping; got 3"),
    "topology list": ("topology", [{"kind": "ring"}], "field 'topology': expected a file path or a mapping"),
    "topology kind mapping": ("topology", {"kind": {"a": 1}, "n": 4}, "field 'topology.kind'"),
    "partition kind list": ("data.partition", {"kind": ["iid"]}, "field 'data.partition'"),
    "model string": ("model", "mlp", "field 'model'"),
    "training number": ("training", 5, "field 'training'"),
    "devices list": ("devices", [1], "field 'devices'"),
    "name mapping": ("name", {"a": 1}, "field 'name'"),
    "servers mapping": ("topology", {"kind": "ring", "n": 4, "servers": {"name": "s"}}, "field 'topology.servers'"),
}


@pytest.mark.parametrize("case", sorted(TYPES))
def test_wrong_types_are_one_line(case: str) -> None:
    dotted, value, pattern = TYPES[case]
    _refused(_with(_gossip(), dotted, value), pattern)


def test_non_string_keys_are_one_line() -> None:
    _refused({**_gossip(), 1: 2}, "Keys should be strings")
    _refused({**_gossip(), None: 2}, "Keys should be strings; write every key as a string")


@pytest.mark.parametrize("data", [[1, 2], "text", 5, None])
def test_scenario_that_is_not_a_mapping(data: Any) -> None:
    _refused(data, "expected a mapping of scenario fields")


# --- 3b. seeds: every seed field is a whole number >= 0 ------------------------------------------


SEEDS = {"seed": ("seed", None), "topology.seed": ("topology", "seed"), "dynamics.seed": ("dynamics", "seed")}


@pytest.mark.parametrize("value", [-1, -(2**63)])
@pytest.mark.parametrize("field", sorted(SEEDS))
def test_negative_seeds_are_refused_when_validated(field: str, value: int) -> None:
    """numpy's SeedSequence takes no negative seed: refused with one line naming the field, never a traceback later
    (``topology.seed: -1`` used to validate, then end in numpy's ValueError when the graph was built)."""
    block, key = SEEDS[field]
    data = _gossip(dynamics={"churn": {"offline": 0.3, "cycle_s": 2.0}})
    if key is None:
        data[block] = value
    else:
        data[block][key] = value
    _refused(data, f"field '{field}': Input should be greater than or equal to 0; got {value}; use a value >= 0")


def test_every_seed_field_of_the_schema_is_checked() -> None:
    """No seed field escapes the check above: the schema's fields named like a seed are exactly SEEDS."""
    from pydantic import BaseModel

    from p2pfl.config.scenario import Scenario

    def seed_fields(model: type[BaseModel], prefix: str) -> list[str]:
        out = []
        for name, info in model.model_fields.items():
            path = f"{prefix}{name}"
            if "seed" in name:
                out.append(path)
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
                if isinstance(arg, type) and issubclass(arg, BaseModel) and arg is not model:
                    out += seed_fields(arg, f"{path}.")
        return out

    assert sorted(set(seed_fields(Scenario, ""))) == sorted(SEEDS)


def test_a_negative_topology_seed_on_the_command_line_is_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from p2pfl.cli import main

    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(_gossip(topology={"kind": "erdos_renyi", "n": 6, "p": 0.8})))
    for argv in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "r")]):
        assert main([*argv, "--set", "topology.seed=-1"]) == 2
        err = capsys.readouterr().err
        assert err == (f"p2pfl: error: {path}: field 'topology.seed': Input should be greater than or equal to 0; "
                       "got -1; use a value >= 0\n")
    shipped = ROOT / "scenarios" / "quickstart.yaml"  # its topology comes from a file: the message names that file
    assert main(["validate", str(shipped), "--set", "topology.seed=-1"]) == 2
    assert "neighbourhood16.yaml: field 'seed': Input should be greater than or equal to 0; got -1" in \
        capsys.readouterr().err
    assert main(["validate", str(path), "--set", "topology.seed=5"]) == 0
    assert not (tmp_path / "r").exists()


# --- 4. non-finite numbers -------------------------------------------------------------


FINITE: dict[str, tuple[str, Any]] = {
    "lr": ("training.lr", None),
    "momentum": ("training.momentum", None),
    "latency": ("topology.link", "latency_s"),
    "bandwidth": ("topology.link", "bandwidth_bps"),
    "loss": ("topology.link", "loss"),
    "flops": ("devices.flops_per_s", None),
    "uplink": ("devices.uplink_bps", None),
    "test_fraction": ("data.test_fraction", None),
    "reply_timeout_s": ("protocol.reply_timeout_s", None),
    "wake_rate_hz": ("protocol.wake_rate_hz", None),
    "radius": ("topology", "radius"),
    "angle": ("data.partition", "angles"),
    "choice value": ("devices.flops_per_s", "choice"),
    "rounds": ("protocol.rounds", None),
}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("case", sorted(FINITE))
def test_non_finite_numbers_are_refused(case: str, value: float) -> None:
    dotted, sub = FINITE[case]
    data = _gossip(devices={})
    if sub is None:
        data = _with(data, dotted, value)
    elif dotted == "topology.link":
        data["topology"]["link"] = {sub: value}
    elif case == "radius":
        data["topology"] = {"kind": "random_geometric", "n": 6, "radius": value}
    elif case == "angle":
        data["data"]["partition"] = {"kind": "rotation", "angles": [0.0, value]}
    else:
        data["devices"] = {"flops_per_s": {"dist": "choice", "values": [1e9, value]}}
    _refused(data, "Input should be a finite number", "use a finite number (.nan and .inf are not allowed)")


def test_non_finite_numbers_from_yaml_and_from_set(tmp_path: Path) -> None:
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(_gossip()).replace("lr: 0.05", "lr: .nan"))
    with pytest.raises(ConfigError, match=r"sc\.yaml: field 'training\.lr': Input should be a finite number; got nan"):
        load(path)
    with pytest.raises(ConfigError, match=r"field 'protocol\.rounds': Input should be a finite number; got inf"):
        load(path, overrides=["training.lr=0.1", "protocol.rounds=.inf"])


# --- 6. --set topology=FILE, null and unset removals, leftover protocol keys -----------


def test_set_topology_loads_a_file_relative_to_the_scenario_then_the_cwd(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t5.yaml").write_text("kind: ring\nn: 5\n")
    (tmp_path / "t7.yaml").write_text("kind: line\nn: 7\n")
    path = tmp_path / "sub" / "sc.yaml"
    path.write_text(yaml.safe_dump(_gossip()))
    monkeypatch.chdir(tmp_path)
    assert load(path, overrides=["topology=t5.yaml"]).topology.n == 5  # the scenario's folder
    assert load(path, overrides=["topology=t7.yaml"]).topology.kind == "line"  # the working directory
    sc = load(path, overrides=["topology=t5.yaml", "topology.n=8"])  # then edit the loaded file
    assert (sc.topology.kind, sc.topology.n) == ("ring", 8)
    assert load(path, overrides=["topology={kind: star, n: 4}"]).topology.kind == "star"
    shipped = load(ROOT / "scenarios" / "quickstart.yaml", overrides=["topology=../topologies/ring16.yaml"])
    assert shipped.topology.kind == "ring" and shipped.topology.n == 16
    with pytest.raises(ConfigError, match=r"sc\.yaml: field 'topology': topology file 'nope\.yaml' not found"):
        load(path, overrides=["topology=nope.yaml"])
    with pytest.raises(ConfigError, match=r"t5\.yaml: field 'n': .*greater than or equal to 1"):
        load(path, overrides=["topology=t5.yaml", "topology.n=0"])


def test_null_and_unset_remove_keys(tmp_path: Path) -> None:
    path = tmp_path / "sc.yaml"
    data = _gossip()
    data["protocol"]["eval_every"] = 1
    path.write_text(yaml.safe_dump(data))
    assert load(path).protocol.eval_every == 1
    assert load(path, overrides=["protocol.eval_every=~"]).protocol.eval_every is None
    assert load(path, overrides=["protocol.eval_every=null", "nothere.x=~"]).protocol.eval_every is None
    assert load(path, unset=["protocol.eval_every"]).protocol.eval_every is None
    assert load_dict(data, unset=["protocol.eval_every"]).protocol.eval_every is None
    assert p2pfl.api.resolve(path, unset=["protocol.eval_every"]).protocol.eval_every is None
    # --unset runs before --set: replace the whole protocol block
    sc = load(path, unset=["protocol"], overrides=["protocol.name=local", "protocol.rounds=2"])
    assert (sc.protocol.name, sc.protocol.rounds) == ("local", 2)
    with pytest.raises(ConfigError, match=r"sc\.yaml: --unset protocol\.evl_every: the scenario has no key "
                                          r"'protocol\.evl_every' \(keys under 'protocol': eval_every, name, rounds\); check the spelling"):
        load(path, unset=["protocol.evl_every"])
    with pytest.raises(ConfigError, match=r"--unset 'a\.\.b': expected a dotted key"):
        load(path, unset=["a..b"])
    with pytest.raises(ConfigError, match=r"sc\.yaml: --set name\.x: 'name' is not a mapping; got 'tiny'"):
        load(path, overrides=["name.x=1"])


def test_unset_reaches_into_a_topology_file() -> None:
    path = ROOT / "scenarios" / "quickstart.yaml"
    assert load(path).topology.edges
    assert not load(path, unset=["topology.edges"]).topology.edges


def test_leftover_protocol_keys_suggest_unset() -> None:
    path = ROOT / "scenarios" / "robotics" / "object_feddrman.yaml"
    with pytest.raises(ConfigError) as info:
        load(path, overrides=["protocol.name=fedavg"])
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert "protocol 'fedavg' has no parameters 'n_clusters', 'beta' (left over from protocol 'feddrman')" in msg
    assert msg.endswith("remove them with --unset protocol.n_clusters --unset protocol.beta")
    sc = load(path, overrides=["protocol.name=fedavg"], unset=["protocol.n_clusters", "protocol.beta"])
    assert sc.protocol.name == "fedavg" and sc.protocol.rounds == 20


def test_docs_robotics_baseline_command_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl.cli import _parser

    text = (ROOT / "docs" / "robotics.md").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line for line in text.splitlines() if "protocol.name=fedavg" in line and line.startswith("p2pfl run")]
    assert lines, "the robotics page's baseline command (docs/robotics.md) is gone"
    for line in lines:
        args = _parser().parse_args(shlex.split(line.split("#", 1)[0])[1:])
        monkeypatch.chdir(ROOT)
        sc = load(args.scenario, overrides=args.overrides, unset=args.unset)
        assert sc.protocol.name == "fedavg"
