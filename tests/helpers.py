"""Small scenario builders shared by tests, the analysis scripts as modules, and a child process Ctrl-C stops."""

from __future__ import annotations

import copy
import importlib.util
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def interruptible() -> None:
    """A ``subprocess.Popen`` ``preexec_fn``: SIGINT's default action in the child, so its Python raises
    KeyboardInterrupt on Ctrl-C even when the test runner itself was started with SIGINT ignored (as a background job
    of a non-interactive shell is), which the child would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: the analysis wing's folders of scripts: benchmarks, report builders, experiment drivers
ANALYSIS_WINGS = ("bench", "reports", "experiments")


def analysis_path(name: str) -> Path:
    """The script ``analysis/<wing>/<name>.py``, in whichever wing it is (one only)."""
    found = [p for wing in ANALYSIS_WINGS if (p := ROOT / "analysis" / wing / f"{name}.py").is_file()]
    assert len(found) == 1, f"analysis script {name!r}: found {found} in {ANALYSIS_WINGS}"
    return found[0]


def analysis_module(name: str) -> ModuleType:
    """The script ``analysis/<wing>/<name>.py`` (not a package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(f"analysis_{name}", analysis_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def digits_scenario(protocol: dict[str, Any], *, n: int = 6, kind: str = "ring", servers: bool = False,
                    **extra: Any) -> dict[str, Any]:
    """A tiny, fast scenario on scikit-learn digits."""
    topo: dict[str, Any] = {"kind": kind, "n": n}
    if servers:
        topo["servers"] = [{"name": "server", "attach": "all", "link": {"latency_s": 0.02, "bandwidth_bps": 5.0e7}}]
    sc: dict[str, Any] = {
        "name": "tiny",
        "seed": 0,
        "topology": topo,
        "data": {"dataset": "digits", "partition": {"kind": "iid"}, "samples_per_client": 40},
        "model": {"name": "mlp", "hidden": 16},
        "training": {"epochs": 1, "batch_size": 16, "lr": 0.05, "momentum": 0.9},
        "protocol": protocol,
    }
    for key, value in extra.items():
        sc[key] = value
    return copy.deepcopy(sc)


def robot_scenario(root: Any, protocol: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A tiny robot scenario: 4 devices of 2 generated MuJoCo suites, one server, short rollouts;
    demos cached under ``root``."""
    sc: dict[str, Any] = {
        "name": "robot-test", "seed": 0,
        "topology": {"kind": "complete", "n": 4, "servers": [{"name": "server", "attach": "all"}]},
        "data": {"dataset": "robotics", "root": str(root), "test_fraction": 0.2,
                 "partition": {"kind": "robot_suites", "suites": ["object", "goal"], "clients_per_suite": 2,
                               "reference_clients": 2, "alpha": 0.5, "demos_per_task": 3, "eval_episodes": 1,
                               "horizon": 4}},
        "training": {"batch_size": 32, "lr": 0.001, "optimizer": "adamw"},
        "protocol": protocol,
    }
    sc.update(extra)
    return copy.deepcopy(sc)


class Lines:
    """Lines of a child process's text stream, read by a thread as they come: wait for one without a fixed sleep.

    ``wait_for`` returns the first line for which ``match`` is true; its ``timeout`` is only a guard against a
    child that hangs (the test fails then), never a delay the test relies on.
    """

    def __init__(self, stream: Any) -> None:
        import threading

        self._lines: list[str] = []
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_for(self, match: Any, timeout: float = 300.0) -> str:
        import time

        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if match(line):
                        return line
                seen = len(self._lines)
                left = deadline - time.monotonic()
                assert not self._done, f"the stream ended without the line; it had: {self._lines}"
                assert left > 0, f"no such line within {timeout:.0f} s; so far: {self._lines}"
                self._cond.wait(left)

    def text(self, timeout: float = 300.0) -> str:
        """Everything, once the stream has ended."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream did not end"
        return "".join(f"{line}\n" for line in self._lines)
