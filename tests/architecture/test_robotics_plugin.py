"""Robotics is a plug-in domain: the core knows no robot, and a user package plugs in a domain the same way.

``p2pfl.plugins.BUILTIN`` registers robotics' dataset, partition kind and model by ``module:object``, as a
distribution's entry points would; its federation scores devices by rollouts (``Federation.evaluation``).
These tests fence that: no module outside ``p2pfl.robotics`` imports it but the known ones below (the list
only shrinks), no core module speaks of robots outside its docstrings and comments, and a user package
registered by entry points (dataset, partition kind, model, an evaluation of its own) runs end to end.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

from tests.architecture.test_import_graph import import_graph

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "p2pfl"

#: Modules outside p2pfl.robotics that import it -> why, for now. A listed module that no longer imports it
#: fails the suite, so the list only shrinks.
KNOWN_IMPORTERS: dict[str, str] = {
    "p2pfl.cli": "`p2pfl robot demo` (the scripted experts) and the robotics row of `p2pfl list datasets` "
                 "(its OpenGL check); a plug-in could bring its own commands and availability check",
    "p2pfl.protocols.server.feddrman": "FedDRMan's subspace loss reads the policy's modalities and its GMM NLL "
                                       "(p2pfl.robotics.policy, p2pfl.robotics.gmm)",
    "p2pfl.protocols.server.fedkd": "FedKD builds the robot policy as its mentee and distils through its GMM head",
}

#: Modules outside p2pfl.robotics whose code (not docstrings or comments) still names robots -> why, for now.
KNOWN_WORDS: dict[str, str] = {
    "p2pfl/plugins.py": "the registration point: BUILTIN names robotics' dataset, partition kind and model",
    "p2pfl/cli.py": "the `p2pfl robot` commands",
    "p2pfl/progress.py": "the setup line while robot demos load",
    "p2pfl/metrics/runs.py": "old robot runs stored their rollout success as accuracy",
    "p2pfl/metrics/summary.py": "the label of the success metric",
    "p2pfl/protocols/server/feddrman.py": "a robot-policy protocol (its errors name the robot data it needs)",
    "p2pfl/protocols/server/fedkd.py": "a robot-policy protocol (its errors name the robot data it needs)",
}

WORDS = re.compile(r"robot|rolls?_?out|mujoco|libero|suites?\b", re.IGNORECASE)


def _importers_of_robotics(graph: nx.DiGraph) -> set[str]:
    return {u for u, v in graph.edges if v.startswith("p2pfl.robotics") and not u.startswith("p2pfl.robotics")}


def test_nothing_outside_robotics_imports_it_but_the_known_modules() -> None:
    found = _importers_of_robotics(import_graph(PKG))
    new = sorted(found - set(KNOWN_IMPORTERS))
    assert not new, f"these modules import p2pfl.robotics; register what they need as a plug-in instead: {new}"
    stale = sorted(set(KNOWN_IMPORTERS) - found)
    assert not stale, f"these no longer import p2pfl.robotics; delete them from KNOWN_IMPORTERS: {stale}"


def _code_words(path: Path) -> list[str]:
    """Identifiers and string constants of ``path`` that name robots (docstrings and comments left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        text = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                else node.arg if isinstance(node, (ast.keyword, ast.arg)) and node.arg
                else node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docs else None)
        if text and WORDS.search(text):
            out.append(text)
    return out


@pytest.mark.slow
def test_the_core_names_no_robot_in_its_code() -> None:
    """The kernel, data, models, executors, config and the rest: no robot branch, field or string."""
    found = {str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
             if "robotics" not in p.relative_to(PKG).parts and _code_words(p)}
    new = sorted(found - set(KNOWN_WORDS))
    assert not new, "robot words in core code (a plug-in's business): " + \
        "; ".join(f"{p}: {sorted(set(_code_words(ROOT / p)))[:5]}" for p in new)
    stale = sorted(set(KNOWN_WORDS) - found)
    assert not stale, f"these name no robot any more; delete them from KNOWN_WORDS: {stale}"


def test_the_fence_sees_a_robot_branch(tmp_path: Path) -> None:
    """A checker that finds nothing fences nothing: the kernel's former branch is caught, a docstring is not."""
    code = tmp_path / "kernel.py"
    code.write_text('"""Robots are scored by rollouts."""\n\ndef evaluate_on(fed):\n    if _rolls_out(fed):\n'
                    '        return fed.rollout_call()\n')
    assert sorted(_code_words(code)) == ["_rolls_out", "rollout_call"]
    graph = nx.DiGraph([("p2pfl.sim.kernel", "p2pfl.robotics.federation"), ("p2pfl.robotics.policy", "p2pfl.data")])
    assert _importers_of_robotics(graph) == {"p2pfl.sim.kernel"}


def test_robotics_registers_like_a_distribution() -> None:
    """Each name robotics registers resolves to the kind of object its group reads."""
    from p2pfl.data.datasets import DATASET_INFO, DatasetInfo
    from p2pfl.data.schema import PARTITION_PLUGINS, PluginPartition
    from p2pfl.plugins import BUILTIN, GROUPS, import_object

    robotics = {group: {name: target for name, target in table.items() if target.startswith("p2pfl.robotics.")}
                for group, table in BUILTIN.items()}
    assert robotics == {GROUPS["datasets"]: {"robotics": "p2pfl.robotics.schema:ROBOTICS"},
                        GROUPS["partitions"]: {"robot_suites": "p2pfl.robotics.schema:RobotSuitesPartition"},
                        GROUPS["models"]: {"robot_policy": "p2pfl.robotics.policy:robot_policy"}}
    info = DATASET_INFO["robotics"]
    assert isinstance(info, DatasetInfo) and info.model == "robot_policy" and info.partitions == ("robot_suites",)
    kind = PARTITION_PLUGINS["robot_suites"]
    assert issubclass(kind, PluginPartition) and kind.datasets == ("robotics",)
    assert callable(import_object(BUILTIN[GROUPS["models"]]["robot_policy"]))


# --- a user package plugs in a domain of its own, through entry points ---------------------------------

USER_DOMAIN = '''
"""A user's domain: noisy sines, one frequency per task; a tiny net; scored by a probe job of its own."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from torch import nn

from p2pfl.data import Federation, Shard
from p2pfl.data.datasets import DatasetInfo
from p2pfl.data.evaluation import JobEvaluation, JobReport
from p2pfl.data.schema import PluginPartition
from p2pfl.seeding import stream

DATASET = DatasetInfo("noisy sines, one frequency per task", 0, (8,), model="sine_net", partitions=("sine_tasks",))
HINTS = []


class SineTasks(PluginPartition):
    datasets: ClassVar[tuple[str, ...] | None] = ("sines",)
    builder: ClassVar[str] = "user_domain:build"

    kind: Literal["sine_tasks"]
    tasks: int = Field(2, ge=1)
    samples: int = Field(32, ge=4)

    @property
    def n_clusters(self) -> int:
        return self.tasks

    def check(self, data) -> None:
        if data.samples_per_client is not None:
            raise ValueError("samples_per_client does not apply to sine_tasks; set partition.samples")


def probe(model, x, y) -> float:
    """The scoring job: mean absolute error on the task's probe set."""
    with torch.no_grad():
        return float((model(x).reshape(-1) - y).abs().mean())


@dataclass(frozen=True, eq=False)
class SineFederation(Federation):
    probes: tuple = ()

    @property
    def metric(self) -> str:
        return "error"

    @property
    def model_hint(self) -> str:
        return "sines"

    def evaluation(self, device, model, forward_flops):
        task = self.true_clusters[device]
        x, y = self.probes[task]
        weights = hashlib.sha1(b"".join(v.numpy().tobytes() for v in model.state_dict().values())).hexdigest()
        flops = forward_flops * len(y)
        return JobEvaluation(key=(task, weights), fn=probe, args=(model, x, y), flops=flops,
                             report=lambda res, cached: JobReport(res, 0 if cached else flops, {"task": task}),
                             what="probe", log="probe_error", fields={"task": None})


def _samples(task: int, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = rng.uniform(-1, 1, (n, 8)).astype(np.float32)
    y = np.sin((task + 1) * x.sum(1)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def build(data, n_devices: int, *, seed: int) -> SineFederation:
    p = data.partition
    shards = []
    for i in range(n_devices):
        rng = stream(seed, "sines", i)
        (tx, ty), (vx, vy) = _samples(i % p.tasks, p.samples, rng), _samples(i % p.tasks, 8, rng)
        shards.append(Shard(tx, ty, vx, vy, i % p.tasks, source="sines"))
    probes = tuple(_samples(t, 16, stream(seed, "sines.probe", t)) for t in range(p.tasks))
    return SineFederation(dataset="sines", shards=tuple(shards), num_classes=0, input_shape=(8,),
                          true_clusters=tuple(i % p.tasks for i in range(n_devices)), partition="sine_tasks",
                          task="regression", probes=probes)


def sine_net(input_shape, num_classes, *, hint=None, width=16) -> nn.Module:
    HINTS.append(hint)
    return nn.Sequential(nn.Flatten(), nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 1))
'''

ENTRY_POINTS = """[p2pfl.datasets]
sines = user_domain:DATASET

[p2pfl.partitions]
sine_tasks = user_domain:SineTasks

[p2pfl.models]
sine_net = user_domain:sine_net
"""


@pytest.fixture
def user_domain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An installed distribution (on sys.path) registering a dataset, a partition kind and a model."""
    import importlib
    import sys

    (tmp_path / "user_domain.py").write_text(USER_DOMAIN, encoding="utf-8")
    dist = tmp_path / "user_domain-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: user-domain\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_domain", raising=False)
    yield importlib.import_module("user_domain")
    sys.modules.pop("user_domain", None)


def _scenario(**partition: object) -> dict:
    return {"name": "sines", "seed": 0,
            "topology": {"kind": "complete", "n": 4, "servers": [{"name": "server", "attach": "all"}]},
            "data": {"dataset": "sines", "partition": {"kind": "sine_tasks", "tasks": 2, **partition}},
            "model": {"name": "auto", "options": {}},
            "training": {"epochs": 1, "batch_size": 8, "lr": 0.05},
            "protocol": {"name": "fedavg", "rounds": 2, "eval_every": 1}}


def test_a_user_package_plugs_in_a_domain_as_robotics_does(user_domain) -> None:
    import p2pfl
    from p2pfl.config import load_dict
    from p2pfl.data import DATASETS

    sc = load_dict(_scenario(samples=16))
    assert type(sc.data.partition) is user_domain.SineTasks and sc.data.n_clusters == 2
    assert sc.model_dump(mode="json")["data"]["partition"] == {"kind": "sine_tasks", "tasks": 2, "samples": 16}
    assert DATASETS["sines"] == "noisy sines, one frequency per task"
    result = p2pfl.run(sc, write=False)
    s = result.summary
    assert s["metric"] == "error" and len(s["error_per_node"]) == 4 and s["partition"]["partition"] == "sine_tasks"
    assert user_domain.HINTS and set(user_domain.HINTS) == {"sines"}  # auto -> the dataset's model, given its hint
    logs = s["logs"]["probe_error"]
    assert len(logs) == 2 * 4 and sum(not e["cached"] for e in logs) == 2 * 2  # one probe per task and model
    assert {e["task"] for e in logs} == {0, 1}


@pytest.mark.parametrize(("change", "message"), [
    ({"data": {"dataset": "sines", "partition": {"kind": "iid"}}},
     "dataset sines goes with partition.kind sine_tasks (and only with it); got dataset 'sines' with partition.kind 'iid'"),
    ({"data": {"dataset": "digits", "partition": {"kind": "sine_tasks"}}},
     "dataset sines goes with partition.kind sine_tasks (and only with it); got dataset 'digits'"),
    ({"data": {"dataset": "sines", "samples_per_client": 3, "partition": {"kind": "sine_tasks"}}},
     "samples_per_client does not apply to sine_tasks"),
    ({"data": {"dataset": "sines", "partition": {"kind": "sine_tasks", "tasks": 0}}},
     "field 'data.partition.tasks': Input should be greater than or equal to 1"),
    ({"data": {"dataset": "sines", "partition": {"kind": "sine_taks"}}},
     "Input tag 'sine_taks' found using 'kind' does not match any of the expected tags: 'iid'"),
    ({"model": {"name": "sine_nett"}}, "unknown model 'sine_nett'; use one of auto, cnn28, cnn32, mlp"),
])
def test_a_user_domain_is_validated_like_a_builtin_one(user_domain, change: dict, message: str) -> None:
    from p2pfl.config import load_dict
    from p2pfl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_dict({**_scenario(), **change})
    assert message in str(err.value) and "\n" not in str(err.value)
    if "expected tags" in message or "unknown model" in message:  # the lists name the plug-ins' names too
        assert ("'sine_tasks'" if "tags" in message else "sine_net") in str(err.value)
