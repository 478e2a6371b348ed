"""Bad input: exit status 2, one line naming the file, the field and the fix; no traceback, no run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from p2pfl.cli import main
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _gossip():
    return digits_scenario({"name": "gossip", "rounds": 1})


def _with(**changes):
    sc = _gossip()
    for dotted, value in changes.items():
        node = sc
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return sc


CASES = {
    "unknown key": (_with(training__epoch=3), r"bad\.yaml: unknown field 'training\.epoch'; remove it"),
    "wrong type": (_with(training__lr="fast"), r"bad\.yaml: field 'training\.lr': .*got 'fast'"),
    "unknown protocol": (_with(protocol={"name": "gosip"}), r"field 'protocol\.name': unknown protocol 'gosip'; choose one of: .*gossip"),
    "bad protocol param": (_with(protocol={"name": "gossip", "mode": "sometimes"}), r"field 'protocol\.mode'"),
    "missing topology file": (_with(topology="nope/missing.yaml"), r"field 'topology': topology file 'nope/missing\.yaml' not found"),
    "disconnected graph": (_with(topology={"kind": "erdos_renyi", "n": 6, "p": 0.0, "tries": 2}),
                           r"disconnected.*allow_disconnected"),
    "missing dataset": (_with(data={"dataset": "fashion_mnist", "root": "/nonexistent/fm"}),
                        r"train-images-idx3-ubyte"),
    "invalid yaml": ("name: [unclosed\n", r"bad\.yaml: invalid YAML at line"),
    "server protocol without server": (_with(protocol={"name": "fedavg"}), r"protocol 'fedavg' needs a server"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_error_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, case):
    data, pattern = CASES[case]
    path = _write(tmp_path, data)
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("p2pfl: error: ")
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    import re

    assert re.search(pattern, err), err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_validate_catches_the_same_errors_without_running(tmp_path, capsys):
    path = _write(tmp_path, CASES["disconnected graph"][0])
    assert main(["validate", str(path)]) == 2
    ok = _write(tmp_path, _gossip())
    assert main(["validate", str(ok)]) == 0
    assert "ok (gossip, 6 devices" in capsys.readouterr().out


def test_set_overrides_and_seed_on_the_command_line(tmp_path, capsys):
    path = _write(tmp_path, _gossip())
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--seed", "7",
                 "--set", "protocol.rounds=2", "--set", "protocol.exchange=push"]) == 0
    resolved = yaml.safe_load((tmp_path / "r" / "scenario.yaml").read_text())
    assert resolved["seed"] == 7
    assert resolved["protocol"]["rounds"] == 2 and resolved["protocol"]["exchange"] == "push"
    assert main(["run", str(path), "--out", str(tmp_path / "r2"), "--set", "protocol.rounds=zero"]) == 2
    assert "field 'protocol.rounds'" in capsys.readouterr().err


def test_existing_output_directory_is_refused(tmp_path, capsys):
    path = _write(tmp_path, _gossip())
    (tmp_path / "r").mkdir()
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_python_dash_m_entry_point_exits_2_on_bad_input(tmp_path):
    path = _write(tmp_path, CASES["unknown protocol"][0])
    proc = subprocess.run([sys.executable, "-m", "p2pfl", "validate", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert "unknown protocol 'gosip'" in proc.stderr and "Traceback" not in proc.stderr


# --- through the real entry point: `python -m p2pfl` in a fresh process -------------------------
#
# Each case: exit status 2, exactly one line on stderr naming the file (and the field) with a fix,
# no traceback, nothing written in the working directory (no runs/, no --out), within seconds.


def _gossip_yaml(**changes) -> str:
    return yaml.safe_dump(_with(**changes))


#: name -> (files to write {name: text | bytes | None (a folder)}, argv after `p2pfl`, what stderr must contain)
CLI_CASES = {
    "binary scenario": ({"sc.bin": bytes(range(256)) * 8}, ["run", "sc.bin"], ["sc.bin: binary data"]),
    "png scenario": ({"sc.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(32)}, ["validate", "sc.png"],
                     ["sc.png: binary data"]),
    "empty scenario": ({"sc.yaml": ""}, ["run", "sc.yaml", "--out", "out"],
                       ["sc.yaml: the file is empty", "needs at least 'topology' and 'protocol'"]),
    "directory scenario": ({"folder": None}, ["run", "folder"], ["folder: is a directory"]),
    "list scenario": ({"sc.yaml": "- 1\n- 2\n"}, ["validate", "sc.yaml"], ["sc.yaml: expected a mapping of scenario fields"]),
    "binary topology file": ({"t.bin": bytes(range(256)), "sc.yaml": _gossip_yaml(topology="t.bin")},
                             ["run", "sc.yaml"], ["t.bin: binary data"]),
    "ring of 10^12 devices": ({"sc.yaml": _gossip_yaml(topology={"kind": "ring", "n": 10**12})}, ["run", "sc.yaml"],
                              ["sc.yaml: field 'topology.n': at most 1,000,000 devices", "use a smaller n"]),
    "huge hidden size": ({"sc.yaml": _gossip_yaml(model__hidden=10**12)}, ["validate", "sc.yaml"],
                         ["sc.yaml: field 'model.hidden'", "use a value <= "]),
    "protocol name list": ({"sc.yaml": _gossip_yaml(protocol={"name": ["gossip"]})}, ["run", "sc.yaml", "--out", "out"],
                           ["sc.yaml: field 'protocol.name': expected a protocol name (a string)"]),
    "protocol number": ({"sc.yaml": _gossip_yaml(protocol=5)}, ["validate", "sc.yaml"],
                        ["sc.yaml: field 'protocol': expected a mapping"]),
    "nan lr": ({"sc.yaml": _gossip_yaml().replace("lr: 0.05", "lr: .nan")}, ["run", "sc.yaml"],
               ["sc.yaml: field 'training.lr': Input should be a finite number; got nan"]),
    "inf latency via --set": ({"sc.yaml": _gossip_yaml()}, ["validate", "sc.yaml", "--set", "topology.link.latency_s=.inf"],
                              ["sc.yaml: field 'topology.link.latency_s': Input should be a finite number"]),
    "leftover protocol keys": ({"sc.yaml": _gossip_yaml(protocol={"name": "gossip", "rounds": 1, "mode": "sync"})},
                               ["run", "sc.yaml", "--set", "protocol.name=local"],
                               ["sc.yaml: field 'protocol': protocol 'local' has no parameter 'mode'",
                                "remove it with --unset protocol.mode"]),
    "unset typo": ({"sc.yaml": _gossip_yaml()}, ["run", "sc.yaml", "--unset", "protocol.rouns"],
                   ["sc.yaml: --unset protocol.rouns: the scenario has no key"]),
    "set topology to a folder": ({"sc.yaml": _gossip_yaml(), "folder": None}, ["validate", "sc.yaml", "--set", "topology=folder"],
                                 ["sc.yaml: field 'topology': 'folder' is a directory"]),
}


def _run_cli_case(root: Path, name: str) -> tuple[subprocess.CompletedProcess, float, list[str], list[str]]:
    files, argv, _ = CLI_CASES[name]
    cwd = root / name.replace(" ", "_").replace("^", "")
    cwd.mkdir()
    for fname, content in files.items():
        if content is None:
            (cwd / fname).mkdir()
        elif isinstance(content, bytes):
            (cwd / fname).write_bytes(content)
        else:
            (cwd / fname).write_text(content)
    before = sorted(p.name for p in cwd.iterdir())
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "p2pfl", *argv], capture_output=True, text=True, cwd=cwd, timeout=300)
    wall = time.perf_counter() - t0
    return proc, wall, before, sorted(p.name for p in cwd.iterdir())


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """Every CLI case, run in parallel (one process per core): name -> (process, wall s, files before, after)."""
    root = tmp_path_factory.mktemp("cli")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(_run_cli_case, root, name) for name in CLI_CASES}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_bad_input_exits_2_with_one_line(cli_results, case):
    proc, wall, before, after = cli_results[case]
    err = proc.stderr
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("p2pfl: error: ")
    for pattern in CLI_CASES[case][2]:
        assert pattern in lines[0], lines[0]
    assert proc.stdout == ""
    assert after == before, "something was written"
    assert wall < 90, f"took {wall:.0f} s"


def test_set_topology_file_and_unset_on_the_command_line(tmp_path, capsys):
    (tmp_path / "t5.yaml").write_text("kind: ring\nn: 5\n")
    path = _write(tmp_path, _with(protocol={"name": "gossip", "rounds": 1, "mode": "sync"}))
    assert main(["validate", str(path), "--set", "topology=t5.yaml"]) == 0
    assert "ok (gossip, 5 devices" in capsys.readouterr().out
    assert main(["validate", str(path), "--set", "protocol.name=local", "--unset", "protocol.mode"]) == 0
    assert "ok (local, 6 devices" in capsys.readouterr().out
    assert main(["validate", str(path), "--set", "protocol.name=local", "--set", "protocol.mode=~"]) == 0
    assert main(["validate", str(path), "--set", "protocol.name=local"]) == 2
    assert "--unset protocol.mode" in capsys.readouterr().err


# --- Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_during_a_run_exits_130_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "p2pfl", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                             "--set", "protocol.rounds=100000", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        time.sleep(8)  # past the imports, into building or simulating (a Ctrl-C anywhere in main is handled)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["p2pfl: interrupted; no run directory written"], stderr
    assert "Traceback" not in stderr + stdout
    assert list(tmp_path.iterdir()) == []  # no run directory, no temporary sibling, no runs/


def test_ctrl_c_while_writing_the_run_directory_leaves_nothing(tmp_path):
    from p2pfl.metrics.rundir import write_run_dir

    def events():
        yield {"t": 0.0}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_run_dir(tmp_path / "run", scenario={"name": "x"}, summary={}, events=events(), timing={},
                      manifest={})
    assert list(tmp_path.iterdir()) == []
