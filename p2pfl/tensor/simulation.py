"""``engine: tensor``: a scenario's fleet as tensors, its rounds as its protocol's tensor program.

The event kernel (``p2pfl.sim.kernel``) gives every device SimPy processes, a context, message objects and
events; at 10^4-10^5 devices that Python is most of a run (``analysis/results/bench_scale.md``). Here the
fleet is a handful of arrays: the models as rows of one ``(N, P)`` tensor (a server's protocols: one row a
server model), the data as ``(N, S, ...)`` tensors, the graph as CSR arrays, the profiles as columns. A round
is the protocol's program (``Protocol.tensor_program``, beside the protocol: ``p2pfl.tensor.program``): it
trains every device a chunk of rows at a time and combines the rows as the protocol's messages say; bytes,
FLOPs and simulated time are the kernel's arithmetic over arrays. It runs what the arrays can express: a
protocol with a program, on a lossless fleet with one kind of link, static or with churn (``dynamics.churn``,
the kernel's draws replayed at round barriers: ``p2pfl.maths.churn``, for the programs that support it), plain
models (float parameters only) trained by SGD. :func:`check` names what a scenario asks beyond that (the program
says what it cannot express: ``RoundProgram.unsupported``; :func:`dynamics_unsupported` the dynamics).

The summary is built by the kernel's builder from the run's totals (``p2pfl.metrics.summary.RunTotals``), so
it has the kernel's fields with the same meaning and reports read both; ``engine: tensor`` in it says which
ran, and ``round_latency_s`` counts the fleet's rounds (``rounds_of: fleet``). events.jsonl holds one
``round`` line a round, not an event per device.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from p2pfl.clustering.scores import adjusted_rand_index, clustering_scores
from p2pfl.data.datasets import dataset_info
from p2pfl.errors import ConfigError
from p2pfl.executors.batched import model_stacks
from p2pfl.learning.models import build_model
from p2pfl.learning.rows import table_for
from p2pfl.maths.churn import ChurnReplay
from p2pfl.metrics.energy import EnergyModel
from p2pfl.metrics.summary import RunTotals, build_summary, finite_scores
from p2pfl.plugins import import_object
from p2pfl.registry import BUILTIN, get_protocol
from p2pfl.seeding import child_seed, stream
from p2pfl.sim.cost import forward_flops_per_sample, train_flops
from p2pfl.sim.dynamics.draws import dynamics_seed
from p2pfl.sim.kernel import resolve_torch_device, torch_threads
from p2pfl.sim.profiles import profile_columns
from p2pfl.tensor.data import fleet_data
from p2pfl.tensor.graph import adjacency
from p2pfl.tensor.program import Fleet, Logs, Round, RoundProgram
from p2pfl.tensor.train import RowTrainer
from p2pfl.topology.build import ServerNode, link_of

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.config.scenario import Scenario
    from p2pfl.protocols.base import ProtocolParams
    from p2pfl.sim.dynamics.schema import DynamicsSpec

__all__ = ["TensorSimulation", "check", "program_of", "dynamics_unsupported", "CHUNK_FLOATS"]

#: A chunk of rows trained or mixed at once holds about this many parameters (16 MB of float32).
CHUNK_FLOATS = 1 << 22


def _refusal(reason: str) -> ConfigError:
    """``reason`` ("field: why") as the one line a user reads."""
    return ConfigError(f"{reason} under engine: tensor; change it, or set engine: events")


def program_of(params: ProtocolParams) -> type[RoundProgram]:
    """The tensor program of the protocol that runs ``params`` (``Protocol.tensor_program``, imported on first
    use); ConfigError naming ``protocol.name`` where the protocol has none, or names one that is not a program."""
    name = params.name
    registered = get_protocol(name)
    target = registered.implementation(params).tensor_program
    field = registered.implementation_field
    if target is None and field is not None and registered.tensor_program is not None:
        raise _refusal(f"protocol.{field}: {name!r} has a tensor program for {field} "
                       f"{getattr(registered, field, None)!r} only, not {getattr(params, field, None)!r}")
    if target is None:
        have = [n for n in BUILTIN if get_protocol(n).tensor_program is not None]
        raise _refusal(f"protocol.name: {name!r} has no tensor program (of the built-in protocols, "
                       f"{', '.join(have[:-1])} and {have[-1]} have one)")
    try:
        program = import_object(target)
    except ValueError as err:
        raise ConfigError(f"protocol.name: {name!r} names the tensor program {target!r}: {err}") from None
    if not (isinstance(program, type) and issubclass(program, RoundProgram)):
        raise ConfigError(f"protocol.name: {name!r} names the tensor program {target!r}, which is not a "
                          "p2pfl.tensor.program.RoundProgram subclass; fix Protocol.tensor_program")
    return program


def check(sc: Scenario) -> type[RoundProgram]:
    """The program that runs ``sc`` under ``engine: tensor``; ConfigError naming the first field it cannot run
    (the program's own limits, ``RoundProgram.unsupported``, then the engine's), and the fix."""
    program = program_of(sc.protocol)
    if (why := program.unsupported(sc)) is not None:
        raise _refusal(why)
    topo = sc.topology
    if sc.dynamics is not None and (why := dynamics_unsupported(sc.dynamics, program)) is not None:
        raise _refusal(why)
    if topo.edges:
        raise _refusal("topology.edges: every link is the topology's link (no per-edge overrides)")
    if topo.link.loss or any(s.link.loss for s in topo.servers):
        raise _refusal("topology.link.loss: links are lossless")
    t = sc.training
    if t.optimizer != "sgd" or t.grad_clip is not None:
        raise _refusal("training.optimizer: training is SGD without gradient clipping")
    if resolve_torch_device(sc.torch_device).type != "cpu":
        raise _refusal("torch_device: rows live on the CPU")
    return program


def dynamics_unsupported(dyn: DynamicsSpec, program: type[RoundProgram]) -> Optional[str]:
    """Why the tensor engine cannot run ``dyn`` with ``program`` ("field: why"), or None: it replays churn (the
    kernel's draws, at round barriers) for the programs that support it, and nothing else of the dynamics."""
    for name in ("link_failures", "mobility"):
        if getattr(dyn, name) is not None:
            return f"dynamics.{name}: the tensor engine's dynamics are churn only"
    for name in ("events", "stragglers"):
        if getattr(dyn, name):
            return f"dynamics.{name}: the tensor engine's dynamics are churn only"
    if dyn.interrupted_training == "lost":
        return ("dynamics.interrupted_training: a device online at a round's start trains to the end of its job "
                "(churn applies at round barriers), so training is never lost")
    churns = dyn.churn is not None and (dyn.churn.trace is not None or not dyn.churn.inert)
    if churns and not program.supports_churn:
        return (f"dynamics.churn: {program.__name__} runs on a static fleet (gossip, DSGD, DAC cosine and FedAvg "
                "run churn)")
    return None


class TensorSimulation:
    """Build a scenario's fleet as tensors and run it (the event kernel's ``Simulation`` interface)."""

    def __init__(self, scenario: Scenario, *, on_round: Optional[Callable[[], None]] = None,
                 on_setup: Optional[Callable[[str], None]] = None, events_path: Optional[Path] = None) -> None:
        t0 = time.perf_counter()
        program = check(scenario)
        setup = on_setup or (lambda step: None)
        self.scenario = sc = scenario
        self.seed = seed = sc.seed
        self._on_round = on_round
        with torch_threads(sc.threads):
            setup("topology")
            self.adjacency = adjacency(sc.topology, seed)
            n = self.adjacency.n
            setup("data")
            self.data = data = fleet_data(sc.data, n, seed)
            setup("the models as rows of one tensor, and each device's batch orders (from its own generator)")
            spec = sc.model
            own = dataset_info(sc.data.dataset).model
            if spec.name == "auto" and own is not None:
                spec = spec.model_copy(update={"name": own})
            common = build_model(spec, data.input_shape, data.num_classes, seed=child_seed(seed, "init"))
            table = table_for(common, chunk=1) if model_stacks(common) else None
            if table is None:
                raise ConfigError(f"model: {spec.name!r} cannot be held and trained as rows under engine: tensor "
                                  "(buffers, dropout, hooks or a loss of its own); set engine: events")
            layout = table.layout
            width = layout.offsets[-1]
            chunk = max(1, CHUNK_FLOATS // width)
            self.chunk = chunk
            trainer = RowTrainer(table.template, layout, data, sc.training, seed=seed, jobs=sc.protocol.rounds,
                                 chunk=chunk)
            flops, up, down, send_j, recv_j, j_flop = profile_columns(sc.devices, n, stream(seed, "profiles"))
            self.energy = EnergyModel(send_j_per_bit=tuple(send_j.tolist()), receive_j_per_bit=tuple(recv_j.tolist()),
                                      j_per_flop=tuple(j_flop.tolist()))
            forward = forward_flops_per_sample(common, data.input_shape)
            self.job_flops = int(train_flops(forward, data.samples * sc.training.epochs))
            first = layout.pack(common.state_dict())

            def drawn(purpose: str, *ids: int) -> torch.Tensor:
                model = build_model(spec, data.input_shape, data.num_classes, seed=child_seed(seed, purpose, *ids))
                return layout.pack(model.state_dict())

            servers = sc.topology.servers
            server = None if not servers else ServerNode(name=servers[0].name, attached=(), link=link_of(servers[0].link),
                                                         egress_bps=servers[0].egress_bps)
            dyn = sc.dynamics
            churn = None if dyn is None else ChurnReplay(dyn.churn, n, dynamics_seed(seed, dyn.seed))
            fleet = Fleet(trainer=trainer, adjacency=self.adjacency, flops_per_s=flops, uplink_bps=up,
                          downlink_bps=down, link=link_of(sc.topology.link), state_bytes=width * layout.dtype.itemsize,
                          job_flops=float(self.job_flops), forward_flops=float(forward), seed=seed, chunk=chunk,
                          first=first, drawn=drawn, server=server, serialized=sc.topology.ingress == "serialized",
                          churn=churn)
            self.program: RoundProgram = program(sc.protocol, fleet)
        self.n = n
        self._events = None if events_path is None else open(events_path, "w", encoding="utf-8")  # noqa: SIM115
        self.n_events = 0
        self.build_wall_s = time.perf_counter() - t0
        self.train_wall_s = self.run_wall_s = 0.0
        self._summary: dict[str, Any] = {}

    def progress_total(self) -> int:
        """``on_round`` calls of a whole run, the kernel's count (``Protocol.progress_total``): one a device a
        round for serverless protocols, one a server a round where a server keeps the rounds."""
        rounds = self.scenario.protocol.rounds
        servers = len(self.program.servers)
        return rounds * servers if servers else rounds * self.n

    def _event(self, **fields: Any) -> None:
        self.n_events += 1
        if self._events is not None:
            self._events.write(json.dumps(fields, separators=(",", ":")) + "\n")

    def run(self) -> dict[str, Any]:
        """Run every round and return the summary."""
        t0 = time.perf_counter()
        sc, n, prog = self.scenario, self.n, self.program
        servers = len(prog.servers)
        sent = np.zeros(n + servers, dtype=np.int64)
        received = np.zeros_like(sent)
        jobs = np.zeros(n, dtype=np.int64)
        by_kind: dict[str, int] = {}
        messages, now = 0, 0.0
        dropped: dict[str, int] = {}
        bytes_dropped: dict[str, int] = {}
        curve: list[dict[str, Any]] = []
        durations: list[float] = []
        logs: list[dict[str, Any]] = []
        metric = self.data.metric
        values = np.full(n, np.nan)
        extra = np.zeros(n)  # modelled FLOPs besides the training jobs (IFCA's E-steps)
        logged: Logs = {}
        with torch_threads(sc.threads):
            if (cd := prog.consensus_distance()) is not None:
                logs.append({"t": 0.0, "value": cd, "round": 0})
            for r in range(1, sc.protocol.rounds + 1):
                prog.now = now
                step: Round = prog.round(r)
                start = now
                now += step.duration_s
                durations.append(step.duration_s)
                sent += step.sent
                received += step.received
                jobs[step.trained] += 1
                if step.flops is not None:
                    extra += step.flops
                messages += step.messages
                for kind, b in step.by_kind.items():
                    by_kind[kind] = by_kind.get(kind, 0) + b
                for why, k in step.dropped.items():
                    dropped[why] = dropped.get(why, 0) + k
                for why, b in step.bytes_dropped.items():
                    bytes_dropped[why] = bytes_dropped.get(why, 0) + b
                if (cd := prog.consensus_distance()) is not None:
                    logs.append({"t": now, "value": cd if np.isfinite(cd) else None, "round": r})
                for name, entries in step.logs.items():  # the protocol's metrics (``ctx.log``), at their times
                    logged.setdefault(name, []).extend({**e, "t": start + e["t"]} for e in entries)
                if step.reported is not None:  # clusters reported (``ctx.report_clusters``): the kernel logs their ARI
                    ari = adjusted_rand_index(self.data.true_clusters, step.reported)
                    logged.setdefault("ari", []).append({"t": now, "value": ari, "round": r})
                point: dict[str, Any] = {"round": r, "t": now}
                if r == sc.protocol.rounds or (sc.protocol.eval_every is not None and r % sc.protocol.eval_every == 0):
                    values = prog.scores()  # a diverged model's score is not finite: the mean is None, as the kernel's
                    point[f"{metric}_mean"] = float(values.mean()) if np.isfinite(values).all() else None
                    curve.append({**point, "bytes_per_device": int(sent[:n].sum()) / n,
                                  "bytes_servers": int(sent[n:].sum())})
                self._event(kind="round", **point, bytes_total=int(sent.sum()))
                if self._on_round is not None:
                    for _ in range(servers if servers else n):
                        self._on_round()
        self.run_wall_s = time.perf_counter() - t0
        flops_each = jobs * self.job_flops + extra
        flops = [int(f) for f in flops_each] + [0] * servers
        head = {"scenario": sc.name, "protocol": sc.protocol.name, "seed": self.seed, "rounds": sc.protocol.rounds,
                "engine": "tensor"}
        final, diverged = finite_scores(values.tolist())
        totals = RunTotals(
            n_devices=n, server_names=prog.servers, bytes_sent=sent.tolist(), bytes_received=received.tolist(),
            bytes_relayed=[0] * (n + servers), bytes_wan=int(sent.sum()) if servers else 0,
            bytes_by_kind=by_kind, messages=messages, compute_flops=flops,
            compute_sim_s_total=float((flops_each / self.program.fleet.flops_per_s).sum()), scores=final,
            diverged=diverged, curve=curve,
            over_time=[{k: v for k, v in p.items() if k != "round"} | {"devices_scored": n} for p in curve],
            round_s=durations, rounds_of="fleet",
            logs={**({"consensus_distance": logs} if logs else {}), **logged},
            messages_dropped=sum(dropped.values()), dropped_by_reason=dropped, bytes_dropped_by_reason=bytes_dropped)
        tail: dict[str, Any] = {"true_clusters": self.data.true_clusters.tolist(), "partition": self.data.stats(),
                                "messages_in_flight": 0, **self.dynamics_summary(now)}
        if (found := prog.clusters()) is not None:  # the protocol's clustering fields (``Protocol.cluster_fields``)
            scored = clustering_scores(tuple(self.data.true_clusters.tolist()), found)
            fields = get_protocol(sc.protocol.name).implementation(sc.protocol).cluster_fields
            tail.update({k: scored[k] for k in fields})
        tail.update(prog.result())
        self._summary = build_summary(totals, metric=metric, head=head, sim_time_s=now, tail=tail, energy=self.energy)
        return self._summary

    def dynamics_summary(self, end: float) -> dict[str, Any]:
        """The kernel's ``dynamics`` block (``Simulation.dynamics_summary``) at the run's end ``end``: each device's
        share of the run online and its offline periods, from the churn replayed; no link failures, no device
        leaves for good (every device runs every round it is online for). Empty without a ``dynamics:`` block."""
        churn = self.program.fleet.churn
        if churn is None:
            return {}
        churn.online_at(end)
        avail = churn.availability()
        return {"dynamics": {
            "availability_mean": float(avail.mean()),
            "availability_per_node": [float(a) for a in avail],
            "offline_periods_per_node": [int(k) for k in churn.offline_periods()],
            "link_down_events": 0,
            "left_fleet": [],
        }}

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None

    def timing(self) -> dict[str, float]:
        """Measured wall-clock seconds (never steer the simulation): ``train_wall_s`` the rows' training,
        ``kernel_wall_s`` the rest of the run (mixing, timing, scoring); no SimPy events."""
        train = self.program.fleet.trainer.train_wall_s
        return {"build_wall_s": self.build_wall_s, "run_wall_s": self.run_wall_s, "train_wall_s": train,
                "eval_wall_s": 0.0, "kernel_wall_s": max(self.run_wall_s - train, 0.0), "events": self.n_events,
                "sim_events": 0}

    def artifacts(self) -> dict[str, bytes]:
        return {}
