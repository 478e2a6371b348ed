"""engine: tensor against the event kernel, and its parts against hand-built values."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

from p2pfl import api
from p2pfl.errors import ConfigError, TopologyError
from p2pfl.executors.batched import ATOL, RTOL
from p2pfl.learning.aggregate import weighted_average
from p2pfl.learning.flat import FlatState
from p2pfl.learning.state import live_state
from p2pfl.metrics.runs import load_curves
from p2pfl.protocols.serverless.gossip_tensor import GossipRounds
from p2pfl.sim.kernel import Simulation
from p2pfl.sim.world import build_any_federation
from p2pfl.tensor.data import fleet_data
from p2pfl.tensor.graph import Adjacency, adjacency
from p2pfl.tensor.simulation import TensorSimulation, check
from p2pfl.tensor.timing import SHORT, fifo
from p2pfl.topology.build import build_topology, graph_seed
from p2pfl.topology.geometric import geometric_pairs, pair_components
from tests.engine.programs import BASE, overrides

SCALE = {"gossip": "scenarios/bench/scale.yaml", "dsgd": "scenarios/bench/scale_dsgd.yaml",
         "fedavg": "scenarios/bench/scale_fedavg.yaml"}


def small(protocol: str, n: int = 24, rounds: int = 3) -> list[str]:
    radius = 1.6 * math.sqrt(math.log(n) / (math.pi * n))
    return [f"topology.n={n}", f"topology.radius={radius}", f"protocol.rounds={rounds}", "protocol.eval_every=1",
            "executor=inline"]


def both(protocol: str, ingress: str = "parallel", **kw: int) -> tuple[dict, dict]:
    sets = [*small(protocol, **kw), f"topology.ingress={ingress}"]
    events = api.run(SCALE[protocol], overrides=[*sets, "engine=events"], write=False).summary
    tensor = api.run(SCALE[protocol], overrides=[*sets, "engine=tensor"], write=False).summary
    return events, tensor


@pytest.mark.parametrize("placement", ["scattered", "strips"])
def test_geometric_adjacency_is_the_kernels_graph(placement: str) -> None:
    sc = api.resolve(SCALE["gossip"], overrides=["topology.n=300", "topology.radius=0.12",
                                                   f"topology.placement={placement}"])
    adj = adjacency(sc.topology, seed=5)
    graph = build_topology(sc.topology, seed=5).graph
    assert adj.n == 300
    assert sorted((i, j) for i in range(300) for j in adj.neighbors(i) if i < j) == sorted(
        (min(u, v), max(u, v)) for u, v in graph.edges())
    assert all(adj.neighbors(i) == tuple(sorted(graph.neighbors(i))) for i in range(300))


def test_adjacency_of_other_kinds_and_components() -> None:
    ring = Adjacency.from_graph(nx.cycle_graph(5))
    assert ring.indptr.tolist() == [0, 2, 4, 6, 8, 10]
    assert ring.neighbors(0) == (1, 4) and pair_components(5, np.array(list(nx.cycle_graph(5).edges()))) == 1
    two = Adjacency.from_pairs(4, np.array([[0, 1], [2, 3]]))
    assert pair_components(4, np.array([[0, 1], [2, 3]])) == 2 and two.sources.tolist() == [0, 1, 2, 3]
    assert pair_components(3, np.zeros((0, 2), dtype=np.int64)) == 3


def test_both_engines_retry_one_geometric_draw_and_refuse_alike() -> None:
    """One retry loop (``topology._common.retry_connected``) draws both engines' graphs: the draw a retry keeps is
    the same, and a fleet that never connects is refused with the same line."""
    sets = ["topology.n=40", "topology.radius=0.22", "topology.tries=50"]
    sc = api.resolve(SCALE["gossip"], overrides=sets)
    graph, adj = build_topology(sc.topology, seed=1).graph, adjacency(sc.topology, seed=1)
    first = geometric_pairs(40, 0.22, int(np.random.default_rng(graph_seed(sc.topology, 1)).integers(2**32)))[1]
    assert pair_components(40, first) > 1  # the first draw is disconnected: a retry was needed
    assert sorted(map(tuple, np.asarray(list(graph.edges())).tolist())) == \
        sorted((i, j) for i in range(40) for j in adj.neighbors(i) if i < j)
    never = api.resolve(SCALE["gossip"], overrides=["topology.n=40", "topology.radius=0.05", "topology.tries=3"])
    with pytest.raises(TopologyError) as kernel:
        build_topology(never.topology, seed=1)
    with pytest.raises(TopologyError) as tensor:
        adjacency(never.topology, seed=1)
    assert str(kernel.value) == str(tensor.value) and "in all 3 tries" in str(kernel.value)


@pytest.mark.parametrize(("dataset", "n"), [("synthetic_logistic", 400), ("synthetic_linear", 30)])
def test_synthetic_rows_are_the_kernels_shards(dataset: str, n: int) -> None:
    sc = api.resolve(SCALE["gossip"], overrides=[f"topology.n={n}", "data.partition.n_clusters=3",
                                                 f"data.dataset={dataset}", "data.test_samples_per_client=5"])
    rows = fleet_data(sc.data, n, seed=3)
    fed = build_any_federation(sc.data, n, 3)
    for i, s in enumerate(fed.shards):
        assert torch.equal(rows.x[i], s.train_x) and torch.equal(rows.y[i], s.train_y)
        assert torch.equal(rows.test_x[i], s.test_x) and torch.equal(rows.test_y[i], s.test_y)
    assert rows.true_clusters.tolist() == list(fed.true_clusters)


def test_fifo_serves_each_queue_in_order() -> None:
    # queue 0: ready 0, 0, 5 with service 1, 2, 1 -> ends 1, 3, 6; queue 1: ready 1, service 4 -> 5
    done = fifo(np.array([0.0, 0.0, 1.0, 5.0]), np.array([1.0, 2.0, 4.0, 1.0]), np.array([0, 0, 1, 0]), 2)
    assert done.tolist() == [1.0, 3.0, 5.0, 6.0]
    one = fifo(np.array([2.0, 0.0, 0.5]), np.array([1.0, 1.0, 1.0]), np.zeros(3, dtype=np.int64), 1)
    assert one.tolist() == [3.0, 1.0, 2.0]


def by_hand(ready: np.ndarray, service: np.ndarray, queue: np.ndarray) -> np.ndarray:
    out = np.empty(len(ready))
    for qid in np.unique(queue):  # one item after another, in order of readiness
        free = 0.0
        for i in sorted(np.flatnonzero(queue == qid), key=lambda i: (ready[i], i)):
            free = out[i] = max(ready[i], free) + service[i]
    return out


@pytest.mark.parametrize("queues", [3, 200])  # queues longer than SHORT (one at a time), and all short (together)
def test_fifo_agrees_with_a_hand_loop(queues: int) -> None:
    rng = np.random.default_rng(queues)
    k = 3 * (SHORT + 10)
    ready, service, queue = rng.random(k) * 5, rng.random(k) * 0.1, rng.integers(0, queues, k)
    assert (np.bincount(queue).max() > SHORT) == (queues == 3)
    assert np.allclose(fifo(ready, service, queue, queues), by_hand(ready, service, queue), rtol=0, atol=1e-12)


DIGITS = ["data.samples_per_client=40", "data.test_samples_per_client=10",
          "data.partition={kind: rotation, angles: [0, 90]}"]


def test_shared_pool_rows_stay_shared_and_are_the_shards_values() -> None:
    sc = api.resolve("scenarios/quickstart.yaml", overrides=DIGITS)
    rows = fleet_data(sc.data, 16, seed=1)
    fed = build_any_federation(sc.data, 16, 1)
    assert rows.x.rows is not None and rows.x.shape == (16, 40, 1, 8, 8)
    pools = {id(s.held("train_x").pool): s.held("train_x").pool for s in fed.shards}
    assert len(pools) == 1 and rows.x.pool.shape == next(iter(pools.values())).shape  # one pool, no per-device copy
    for i, s in enumerate(fed.shards):
        one = torch.tensor([i])
        assert torch.equal(rows.x[one][0], s.train_x) and torch.equal(rows.test_x[one][0], s.test_x)
        assert torch.equal(rows.y[i], s.train_y)


@pytest.mark.slow
def test_fedavg_on_pooled_images_matches_the_event_kernel() -> None:
    sets = [*DIGITS, "protocol.name=fedavg", "protocol.rounds=3", "topology.servers=[{attach: all}]", "executor=inline"]
    ev, te = (api.run("scenarios/quickstart.yaml", overrides=[*sets, f"engine={e}"],
                      unset=["protocol.mode", "protocol.exchange", "protocol.reply_timeout_s", "topology.edges"],
                      write=False).summary
              for e in ("events", "tensor"))
    for key in ("accuracy_per_node", "bytes_per_node", "compute_flops_per_node"):
        assert te[key] == ev[key], key


@pytest.mark.slow
def test_dsgd_matches_the_event_kernel() -> None:
    """DSGD is synchronous: the same batch orders, the same mixing, the same messages."""
    ev, te = both("dsgd")
    assert te["accuracy_per_node"] == ev["accuracy_per_node"]
    assert [p["accuracy_mean"] for p in te["accuracy_curve"]] == [p["accuracy_mean"] for p in ev["accuracy_curve"]]
    for key in ("bytes_per_node", "bytes_received_per_node", "messages_total", "bytes_by_kind",
                "compute_flops_per_node"):
        assert te[key] == ev[key], key
    # rounds as barriers: never earlier than the kernel, where a device starts when its neighbours' models came
    assert ev["sim_time_s"] <= te["sim_time_s"] <= 1.05 * ev["sim_time_s"]


@pytest.mark.slow
def test_dsgd_weights_are_inlines_within_the_batched_tolerance() -> None:
    """After 3 rounds every device's weights are the inline event kernel's within ``batched.ATOL``/``RTOL``."""
    sc = api.resolve(SCALE["dsgd"], overrides=[*small("dsgd"), "engine=events"])
    kernel = Simulation(sc)
    kernel.run()
    tensor = TensorSimulation(sc.model_copy(update={"engine": "tensor"}))
    tensor.run()
    rows = tensor.program.rows
    assert rows is not None
    for i, model in sorted(kernel.protocol.models.items()):  # type: ignore[attr-defined]
        mine = live_state(model).vector
        assert torch.allclose(rows[i], mine, atol=ATOL, rtol=RTOL), i
    assert not torch.equal(rows[0], rows[1])  # the devices' models differ: the comparison is not vacuous


@pytest.mark.slow
@pytest.mark.parametrize("ingress", ["parallel", "serialized"])
def test_fedavg_matches_the_event_kernel(ingress: str) -> None:
    ev, te = both("fedavg", ingress=ingress)
    assert te["accuracy_per_node"] == ev["accuracy_per_node"]
    for key in ("bytes_per_node", "bytes_per_server", "bytes_received_per_server", "messages_total", "bytes_by_kind",
                "compute_flops_total"):
        assert te[key] == ev[key], key
    assert te["sim_time_s"] == pytest.approx(ev["sim_time_s"], rel=1e-12)


@pytest.mark.slow
def test_ifca_matches_the_event_kernel_balanced_init_included() -> None:
    """IFCA's E-step, training and per-cluster averages are synchronous: the same clusters, scores and bytes."""
    sets = [*small("gossip", n=40), "protocol.name=ifca", "protocol.n_clusters=2", "protocol.balanced_init=true",
            "data.partition.n_clusters=2", "topology.servers=[{attach: all, egress_bps: 1.0e9}]"]
    runs = [api.run(SCALE["gossip"], overrides=[*sets, f"engine={e}"], unset=["protocol.mode", "protocol.exchange"],
                    write=False).summary for e in ("events", "tensor")]
    ev, te = runs
    for key in ("accuracy_per_node", "clusters", "ari", "bytes_per_node", "bytes_per_server", "bytes_by_kind",
                "messages_total", "compute_flops_per_node"):
        assert te[key] == ev[key], key
    assert te["sim_time_s"] == pytest.approx(ev["sim_time_s"], rel=1e-12)
    assert te["logs"]["ifca_init_balanced"] == ev["logs"]["ifca_init_balanced"]
    assert [e["value"] for e in te["logs"]["assignment"]] == [e["value"] for e in ev["logs"]["assignment"]]
    assert 0 < te["ari"] <= 1 and te["bytes_by_kind"]["probe"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("ingress", ["parallel", "serialized"])
def test_oracle_matches_the_event_kernel(ingress: str) -> None:
    """The federated Oracle: joins, then FedAvg within each true cluster (half the devices a round)."""
    sets = [*small("gossip", n=40), "protocol.name=oracle", "protocol.client_fraction=0.5",
            "data.partition.n_clusters=3", f"topology.ingress={ingress}",
            "topology.servers=[{attach: all, egress_bps: 1.0e9}]"]
    ev, te = (api.run(SCALE["gossip"], overrides=[*sets, f"engine={e}"], unset=["protocol.mode", "protocol.exchange"],
                      write=False).summary for e in ("events", "tensor"))
    for key in ("accuracy_per_node", "clusters", "ari", "bytes_per_node", "bytes_per_server", "bytes_by_kind",
                "messages_total", "compute_flops_per_node"):
        assert te[key] == ev[key], key
    assert te["sim_time_s"] == pytest.approx(ev["sim_time_s"], rel=1e-12)
    assert te["bytes_by_kind"]["join"] == 40 * 72 and len(te["clusters"]) == 3


def test_local_matches_the_event_kernel() -> None:
    sets = [*small("gossip", n=12, rounds=2), "protocol.name=local"]
    ev, te = (api.run(SCALE["gossip"], overrides=[*sets, f"engine={e}"], unset=["protocol.mode", "protocol.exchange"],
                      write=False).summary for e in ("events", "tensor"))
    for key in ("accuracy_per_node", "bytes_total", "messages_total", "compute_flops_per_node", "sim_time_s"):
        assert te[key] == ev[key], key
    assert te["bytes_total"] == 0 and "consensus_distance" not in te["logs"]


@pytest.mark.slow
def test_gossip_sends_what_the_kernel_sends_and_reruns_identically() -> None:
    ev, te = both("gossip")
    for key in ("bytes_total", "messages_total", "bytes_by_kind", "compute_flops_total"):
        assert te[key] == ev[key], key
    again = api.run(SCALE["gossip"], overrides=[*small("gossip"), "engine=tensor"], write=False).summary
    assert json.dumps(again, sort_keys=True) == json.dumps(te, sort_keys=True)
    assert te["engine"] == "tensor" and "exchanges_without_peer" not in te  # the kernel reports it under dynamics
    assert abs(te["accuracy_mean"] - ev["accuracy_mean"]) < 0.1  # the same task, other pairs (module docstring)


def test_gossip_mix_is_the_sequential_exchanges_bit_for_bit() -> None:
    sc = api.resolve(SCALE["gossip"], overrides=small("gossip", n=16))
    prog = TensorSimulation(sc).program
    assert isinstance(prog, GossipRounds) and prog.rows is not None
    prog.rows.copy_(torch.randn(prog.rows.shape, generator=torch.Generator().manual_seed(0)))
    start = prog.rows.clone()
    src, dst = np.array([0, 2, 3, 4, 5, 7, 3]), np.array([1, 3, 4, 5, 2, 3, 2])  # 0-1 alone; 2..5 and 7 overlap
    order = copy.deepcopy(prog.rng).permutation(len(src))  # the draw _mix makes
    prog._mix(src, dst)
    x = start.clone()
    for i, j in zip(src[order], dst[order]):  # by hand, one exchange after another
        xi, xj = x[i].clone(), x[j].clone()
        x[i], x[j] = xi + (xj - xi) * 0.5, xj + (xi - xj) * 0.5
    assert torch.equal(prog.rows, x)
    assert torch.allclose(prog.rows.double().mean(dim=0), start.double().mean(dim=0), atol=1e-6)
    assert torch.allclose(prog.rows[0], (start[0] + start[1]) / 2, atol=1e-6) and torch.allclose(prog.rows[1], prog.rows[0], atol=1e-6)


def test_run_directory_holds_a_line_a_round(tmp_path: Path) -> None:
    res = api.run(SCALE["dsgd"], overrides=[*small("dsgd", n=12, rounds=2), "engine=tensor"], out=tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["round"]) for e in lines] == [("round", 1), ("round", 2)]
    assert lines[-1]["bytes_total"] == res.summary["bytes_total"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["engine"] == "tensor"
    curves = load_curves(tmp_path / "run")  # the report reads the fleet's bytes from the round lines
    assert curves["bytes"].tolist() == [e["bytes_total"] for e in lines]
    assert curves["bytes"].iloc[-1] == res.summary["bytes_total"] > 0


@pytest.mark.parametrize(("setting", "field"), [
    ("protocol.name=fedprox", "protocol.name"),  # a built-in protocol without a tensor program
    ("protocol.mode=async", "protocol.mode"),
    ("topology.link.loss=0.1", "topology.link.loss"),
    ("training.optimizer=adamw", "training.optimizer"),
    ("topology.ingress=serialized", "topology.ingress"),
    ("protocol.name=oracle", "protocol.mode"),  # mode: pooled (set below) is not FedAvg within clusters
])
def test_what_the_engine_cannot_run_is_named(setting: str, field: str) -> None:
    sets = [s for s in small("gossip") if not s.startswith("protocol.eval")]
    if setting == "protocol.name=oracle":
        sets = [*sets, "protocol.mode=pooled", "protocol.exchange=null", "topology.servers=[{attach: all}]"]
    elif setting.startswith("protocol.name"):
        sets = [*sets, "protocol.mode=null", "protocol.exchange=null"]
    sc = api.resolve(SCALE["gossip"], overrides=[*sets, setting, "engine=tensor"])
    with pytest.raises(ConfigError, match=f"^{field}: .*set engine: events$"):
        check(sc)


def test_a_plug_in_protocol_without_a_program_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A third-party protocol (``module:Class``) names no tensor program: ``engine: tensor`` refuses it with one line
    naming the field (exit status 2 from the command line), and nothing is written. A program is never inherited:
    ``RNDGossip`` is not gossip, it names its own."""
    example = Path(__file__).resolve().parents[2] / "examples" / "custom_protocol"
    monkeypatch.syspath_prepend(str(example))
    from fanout_gossip import FanoutGossip  # type: ignore[import-not-found]

    from p2pfl.cli import main
    from p2pfl.protocols.serverless.gossip import Gossip
    from p2pfl.protocols.serverless.rnd_gossip import RNDGossip

    assert FanoutGossip.tensor_program is None and Gossip.tensor_program is not None
    assert RNDGossip.tensor_program == "p2pfl.protocols.serverless.rnd_gossip_tensor:RNDGossipRounds"
    out = tmp_path / "run"
    code = main(["run", str(example / "scenario.yaml"), "--set", "engine=tensor", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and "protocol.name: 'fanout_gossip:FanoutGossip' has no tensor program" in err
    assert err.endswith("set engine: events")


def test_an_ingress_capacity_is_refused_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^topology\.servers\[0\]\.ingress_bps: "):
        api.run(SCALE["fedavg"], overrides=[*small("fedavg"), "engine=tensor",
                                            "topology.servers=[{attach: all, ingress_bps: 1.0e9}]"], out=out)
    assert not out.exists() and not list(tmp_path.iterdir())


def dropout_mlp(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """A user model the tensor engine cannot train as rows (dropout draws from the global generator)."""
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, num_classes))


def test_a_model_that_cannot_be_rows_is_refused() -> None:
    sc = api.resolve(SCALE["gossip"], overrides=[*small("gossip", n=8), "engine=tensor",
                                                 "model.name=tests.engine.test_engine:dropout_mlp"])
    with pytest.raises(ConfigError, match=r"^model: .*dropout.*set engine: events$"):
        TensorSimulation(sc)


def test_data_scored_by_jobs_of_its_own_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A federation that scores devices its own way (robot rollouts) cannot be stacked test sets."""
    import p2pfl.tensor.data as engine_data
    from p2pfl.data.shards import Federation

    class ByRollouts(Federation):
        def evaluation(self, device, model, forward_flops):  # type: ignore[no-untyped-def]
            raise AssertionError("not reached: the engine refuses before scoring")

    sc = api.resolve("scenarios/quickstart.yaml", overrides=["engine=tensor"])
    built = build_any_federation(sc.data, 4, 0)
    monkeypatch.setattr(engine_data, "build_any_federation",
                        lambda spec, n, seed: ByRollouts(**{k: getattr(built, k) for k in (
                            "dataset", "shards", "num_classes", "input_shape", "true_clusters", "partition", "task")}))
    with pytest.raises(ConfigError, match=r"^data: .*set engine: events$"):
        engine_data.fleet_data(sc.data, 4, 0)


@pytest.mark.parametrize("program", ["fedavg", "ifca", "oracle"])
def test_a_servers_average_is_weighted_average_of_the_uploads_bit_for_bit(program: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The tensor engine's server averages are the kernel's ``weighted_average`` (one float64 sum, in id order) of
    the rows its devices trained: at 40 devices, where summing a block of rows at once would add in another order."""
    sets, unset = overrides(program, "tensor", ("topology.n=40", "topology.radius=0.3", "protocol.rounds=1"))
    sc = api.resolve(BASE, overrides=sets, unset=unset)
    sim = TensorSimulation(sc)
    trainer = sim.program.fleet.trainer
    uploads: dict[int, torch.Tensor] = {}
    train = trainer.train

    def kept(rows: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        out = train(rows, devices)
        uploads.update({int(d): r.clone() for d, r in zip(devices, rows)})
        return out

    monkeypatch.setattr(trainer, "train", kept)
    sim.run()
    prog, weight = sim.program, float(trainer.data.samples)
    groups = {0: sorted(uploads)} if program == "fedavg" else \
        {c: [d for d in sorted(uploads) if int(prog.cluster_of[d] if program == "oracle" else prog.assignment[d]) == c]
         for c in range(len(prog.models))}  # type: ignore[attr-defined]
    models = prog.global_row.unsqueeze(0) if program == "fedavg" else prog.models  # type: ignore[attr-defined]
    assert len(uploads) == 40 and max(len(g) for g in groups.values()) > 16
    for c, members in groups.items():
        if members:
            mean = weighted_average([(FlatState(uploads[d], trainer.layout), weight) for d in members])
            assert torch.equal(models[c], mean.vector), c  # type: ignore[union-attr]
