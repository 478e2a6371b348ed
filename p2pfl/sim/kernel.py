"""The Simulation: builds the world from a Scenario and runs it in SimPy.

Build order: topology -> data shards -> device profiles -> network -> protocol.
Each consumer gets its own seed stream (``p2pfl.seeding``), so the same
scenario and seed give the same simulated history, byte for byte. The protocol
is built from its params and a read-only :class:`RunInfo`; it reaches the world
only through node contexts.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import math
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import networkx as nx
import numpy as np
import simpy
import torch
from torch import nn

from p2pfl.data.datasets import dataset_info
from p2pfl.data.evaluation import JobEvaluation, TestSetEvaluation
from p2pfl.errors import ConfigError, UserError
from p2pfl.executors.base import Done, Executor, Future, Joined
from p2pfl.executors.jobs import CallJob, EvalJob
from p2pfl.executors.select import make_executor, resolve_kind
from p2pfl.learning.batches import node_generator
from p2pfl.learning.clone import clone_module
from p2pfl.learning.flat import FlatState
from p2pfl.learning.rows import ModelTable, RowModel, table_for
from p2pfl.learning.saved import MODELS_FILE, pack_models, state_arrays
from p2pfl.learning.state import flatten_live_
from p2pfl.metrics.energy import EnergyModel
from p2pfl.metrics.recorder import Recorder
from p2pfl.metrics.summary import build_summary, recorder_totals
from p2pfl.seeding import child_seed, stream
from p2pfl.sim import heap
from p2pfl.sim.context import DeviceContext, ServerContext
from p2pfl.sim.cost import forward_flops_per_sample, train_flops
from p2pfl.sim.dynamics import Fleet
from p2pfl.sim.dynamics.draws import dynamics_seed
from p2pfl.sim.dynamics.mobility import Mover
from p2pfl.sim.dynamics.schedule import start_dynamics
from p2pfl.sim.evaluations import EvaluationStore
from p2pfl.sim.network import Network
from p2pfl.sim.profiles import draw_profiles
from p2pfl.sim.runinfo import RunInfo, ServerInfo
from p2pfl.sim.world import build_any_federation
from p2pfl.topology import Link, build_topology
from p2pfl.topology.build import link_of

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.config.scenario import Scenario
    from p2pfl.protocols.base import Protocol

__all__ = ["Simulation", "SimulationStalled", "build_only", "few_collections", "resolve_torch_device", "torch_threads"]

#: Allocations between two young-generation collections while a simulation runs (Python's default: 700).
GC_GEN0 = 20_000


#: Evaluations whose scores may be outstanding at once (then the oldest is awaited).
_MAX_PENDING_EVALS = 10_000


class SimulationStalled(UserError):
    """No event is left but the protocol has not finished (e.g. a lost message awaited forever)."""


def resolve_torch_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; a missing CUDA device is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"field 'torch_device': {name!r} asked for but CUDA is not available; use 'cpu' or 'auto'")
    return torch.device(name)


class Simulation:
    """One run of one scenario.

    ``protocol`` is the protocol class; by default it is looked up in the
    registry from ``scenario.protocol.name`` (the kernel itself imports no protocol).
    ``on_setup`` is called with the step's name before each build step: ``"topology"``,
    ``"data"``, ``"network"``, ``"protocol"``, ``"executor:KIND"`` when it starts workers (progress display). ``executor``
    replaces the scenario's (its owner closes it; a study or a test reuses one pool of workers).
    ``events_path``: stream the event log to this file while the run goes (``recorder.events``
    then stays empty; memory stays bounded). ``cores``: the cores the scenario's executor may use (a sweep
    gives each cell its share; None: every core this process may use). ``evaluations``: a folder that keeps
    the results of the federation's scoring jobs between runs of this scenario (``p2pfl.sim.evaluations``).
    """

    def __init__(self, scenario: Scenario, protocol: Optional[type[Protocol]] = None, *,
                 on_round: Optional[Callable[[], None]] = None,
                 on_setup: Callable[[str], None] | None = None, executor: Optional[Executor] = None,
                 events_path: Optional[Path] = None, cores: Optional[int] = None,
                 evaluations: Optional[str | Path] = None) -> None:
        t0 = time.perf_counter()
        setup = on_setup or (lambda step: None)
        self.scenario = scenario
        self.seed = seed = scenario.seed
        self.training = scenario.training
        self.threads = scenario.threads  # torch threads of every job
        self.torch_device = resolve_torch_device(scenario.torch_device)
        if protocol is None:
            from p2pfl.registry import get_protocol

            protocol = get_protocol(scenario.protocol.name)
        cls = protocol.implementation(scenario.protocol)
        setup("topology")
        self.topology = build_topology(scenario.topology, seed=seed)
        self.n_devices = n = self.topology.n_devices
        self.server_ids = tuple(range(n, n + len(self.topology.servers)))
        # one code path whatever the device: on CPU .to() returns the same tensors
        setup("data")
        with torch_threads(scenario.threads):  # not the caller's count: a shared machine's cores stay shared
            self.federation = build_any_federation(scenario.data, n, seed).to(self.torch_device)
        self.metric = self.federation.metric
        self.env = simpy.Environment()
        self._on_round = on_round
        self._rounds_done = 0
        self.recorder = Recorder(n + len(self.server_ids), metric=self.metric, on_round=self._round_done, n_devices=n,
                                 messages=scenario.events == "all")
        setup("network")
        self.profiles = draw_profiles(scenario.devices, n, stream(seed, "profiles"))
        self.fleet = self._build_fleet()
        self.network = self._build_network()
        self.run_info = self._run_info()
        setup("protocol")
        self.protocol: Protocol = cls(scenario.protocol, self.run_info)
        if self.protocol.requires_server() and not self.topology.servers:
            raise ConfigError(f"protocol {cls.name!r} needs a server; add 'servers: [{{attach: all}}]' to the topology")
        if scenario.dynamics is not None:
            self.protocol.check_dynamics()
        self.mover: Optional[Mover] = None
        self.interrupted_training = "resumed" if scenario.dynamics is None else scenario.dynamics.interrupted_training
        self.defer_uploads = scenario.executor.defer_uploads
        self.left_fleet: tuple[int, ...] = ()  # devices offline for good when the run ended (dynamics)
        self._common: Optional[nn.Module] = None
        self._table: Optional[ModelTable | Literal[False]] = None  # False: models of their own
        self._common_flat: FlatState
        #: the evaluation grid's step (``evaluation.every_s``, ``p2pfl.sim.grid``), None without one
        self.grid_every_s = None if scenario.evaluation is None else scenario.evaluation.every_s
        if self.grid_every_s is not None:
            self._check_grid()
        self._owns_executor = executor is None
        if executor is None:
            model = self._common_model()  # built now for the estimate, copied for every device later
            samples = sum(int(s.train_y.shape[0]) for s in self.federation.shards)
            kind = resolve_kind(scenario.executor, threads=scenario.threads, torch_device=self.torch_device,
                                train_flops=self._estimated_train_flops(model, samples), model=model, cores=cores)
            if kind in ("process", "ray"):  # they start workers
                setup(f"executor:{kind}")
            executor = make_executor(kind, scenario.executor, threads=scenario.threads, cores=cores,
                                     renders=self.federation.renders, work_flops=self.protocol.work_flops(samples))
        self.executor = executor
        if self.executor.name != "inline":
            self.executor.share(self.federation.shards)
        self._evals: deque[tuple[Future[Any], Callable[[Any], None]]] = deque()
        self._scoring_jobs: dict[Hashable, Future[Any]] = {}  # JobEvaluation results by key (bounded)
        #: each device's last scored model and round (``save_models: final``)
        self._last_scored: dict[int, tuple[Optional[int], dict[str, np.ndarray]]] = {}
        self.evaluations = None if evaluations is None else EvaluationStore(evaluations, scenario.threads)
        self._flops: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
        #: Every ``report_clusters`` of the run with its scores: ``{"round", "t", "clusters", "ari", ...}``.
        self.clustering_events: list[dict[str, Any]] = []
        self.train_wall_s = 0.0  # submitting and awaiting training jobs (contexts add to it)
        self.eval_wall_s = 0.0
        self.run_wall_s = 0.0
        self._events_file = None
        if events_path is not None:  # opened last: nothing after it can fail and leave it open
            self._events_file = open(events_path, "w", encoding="utf-8")  # noqa: SIM115
            self.recorder.stream_to(self._events_file)
        self.build_wall_s = time.perf_counter() - t0

    def _estimated_train_flops(self, model: nn.Module, samples: int) -> float:
        """Modelled FLOPs of every device's local epochs on the fleet's ``samples`` over the rounds (``auto``
        decides by it)."""
        rounds = getattr(self.scenario.protocol, "rounds", 1)
        return float(train_flops(forward_flops_per_sample(model, self.federation.input_shape),
                                 samples * self.training.epochs * rounds))

    def _run_info(self) -> RunInfo:
        fed = self.federation
        graph = self.topology.graph  # frozen: the protocol's view cannot change the network
        if self.server_ids:
            graph = graph.copy()
            graph.remove_nodes_from(self.server_ids)
        nx.freeze(graph)
        servers = tuple(ServerInfo(sid, spec.name, tuple(spec.attached))
                        for sid, spec in zip(self.server_ids, self.topology.servers))
        model = self.scenario.model
        own = dataset_info(self.scenario.data.dataset).model  # the model ``auto`` means for this dataset
        if model.name == "auto" and own is not None:
            model = model.model_copy(update={"name": own})
        return RunInfo(seed=self.seed, n_devices=self.n_devices, servers=servers, graph=graph,
                       input_shape=tuple(fed.input_shape), num_classes=fed.num_classes, task=fed.task,
                       dataset=fed.dataset, model=model, training=self.training,
                       torch_device=self.torch_device, model_hint=fed.model_hint,
                       true_clusters=tuple(fed.true_clusters))

    def _check_grid(self) -> None:
        """Refuse, in one line, an evaluation grid this run cannot score: a protocol that does not say which model
        each device holds now, or data scored by jobs of their own (robot rollouts: charged compute and logs)."""
        name = self.protocol.name
        if not self.protocol.current_models:
            raise ConfigError(f"field 'evaluation.every_s': protocol {name!r} does not say which model each device "
                              "holds now (Protocol.current_model), so the grid cannot score it; remove evaluation "
                              "or use another protocol")
        if isinstance(self.federation.evaluation(0, self._common_model(), 0), JobEvaluation):
            raise ConfigError(f"field 'evaluation.every_s': dataset {self.federation.dataset!r} scores a model by a "
                              "job of its own (charged as compute, with logs of its own), which the grid does not run; "
                              "remove evaluation")

    def _build_network(self) -> Network:
        links: dict[tuple[int, int], Link] = {(u, v): d["link"] for u, v, d in self.topology.graph.edges(data=True)}
        up = {i: p.uplink_bps for i, p in enumerate(self.profiles)}
        down = {i: p.downlink_bps for i, p in enumerate(self.profiles)}
        serialized = self.scenario.topology.ingress == "serialized"
        ingress = dict.fromkeys(range(self.n_devices), 1) if serialized else {}
        egress: dict[int, int] = {}
        for sid, server in zip(self.server_ids, self.topology.servers):
            # a server is limited by its links, and by its own capacity where one is given (ServerSpec)
            up[sid] = server.egress_bps or math.inf
            down[sid] = server.ingress_bps or math.inf
            egress[sid] = _slots(server.egress_bps, server.link.bandwidth_bps)
            if server.ingress_bps is not None or serialized:
                ingress[sid] = _slots(server.ingress_bps, server.link.bandwidth_bps)
            for d in server.attached:
                links[(d, sid)] = server.link
        return Network(self.env, links, up, down, lambda i: stream(self.seed, "loss", i),
                       lambda what, msg, u, v, **kw: self.recorder.message(what, msg, u, v, self.env.now, **kw),
                       no_relay=frozenset(self.server_ids), fleet=self.fleet, egress_slots=egress,
                       ingress_slots=ingress)

    def _build_fleet(self) -> Optional[Fleet]:
        """The live fleet under ``dynamics:`` (None for a static one)."""
        dyn = self.scenario.dynamics
        if dyn is None:
            return None
        topo = self.scenario.topology
        server_links = {(d, sid): server.link for sid, server in zip(self.server_ids, self.topology.servers)
                        for d in server.attached}
        mob = dyn.mobility
        return Fleet(self.env, self.topology.graph, server_links, link_of(topo.link),
                     lambda kind, **fields: self.recorder.event(self.env.now, kind, **fields),
                     radius=topo.radius if mob is not None else None,
                     latency_s_per_unit=mob.latency_s_per_unit if mob is not None else 0.0)

    @property
    def dynamics_seed(self) -> int:
        """The seed of the dynamics' streams: ``dynamics.seed``, else one derived from the scenario's."""
        dyn = self.scenario.dynamics
        return dynamics_seed(self.seed, None if dyn is None else dyn.seed)

    # --- services for contexts and protocols -------------------------------------------------

    def new_model(self, node: Optional[int] = None) -> nn.Module:
        """The scenario's model; common initial weights, or node-specific ones when ``node`` is given.

        The common model is built once and copied (the same bits; building draws every weight anew),
        and laid out flat (``p2pfl.learning.flat``) where its state allows. Every model handed out has
        the common model's architecture, so its FLOPs per sample are counted once, on the common model.
        """
        common = self._common_model()
        table = self._model_table()
        if table is not None:  # a row of the fleet's table (p2pfl.learning.rows): the same values, the same bits
            if node is None:
                return table.add(self._common_flat.vector)
            own = self.run_info.build_model(child_seed(self.seed, "init", node))
            return table.add(table.layout.pack(own.state_dict()))
        if node is not None:
            model = self.run_info.build_model(child_seed(self.seed, "init", node))
        else:
            model = clone_module(common)
        flatten_live_(model)  # state maths in one operation per model (the same bits)
        self._flops[model] = self.forward_flops(common)
        return model

    def _model_table(self) -> Optional[ModelTable]:
        """The table the protocol's models are rows of, when it takes rows and the model can be one."""
        if self._table is None:
            common = self._common_model()
            table = table_for(common, chunk=self.n_devices + len(self.server_ids)) if (
                self.protocol.model_rows and self.torch_device.type == "cpu") else None
            self._table = table or False
            if table is not None:
                self._common_flat = FlatState(table.layout.pack(common.state_dict()), table.layout)
                self._flops[table.template] = self.forward_flops(common)
        return self._table if self._table is not False else None

    def _common_model(self) -> nn.Module:
        """The common initial model, built once (``new_model`` hands out copies)."""
        if self._common is None:
            self._common = self.run_info.build_model(child_seed(self.seed, "init"))
        return self._common

    def forward_flops(self, model: nn.Module) -> int:
        """Forward FLOPs per sample of ``model`` (cached by architecture)."""
        if isinstance(model, RowModel):
            model = model.table.template
        flops = self._flops.get(model)
        if flops is None:
            flops = self._flops[model] = forward_flops_per_sample(model, self.federation.input_shape)
        return flops

    def evaluate_on(self, device: int, model: nn.Module, round: Optional[int]) -> None:
        """The run's score of ``model`` for ``device``, recorded for it: as the federation says
        (``Federation.evaluation``), on the device's local test set or by a job of its own."""
        t0 = time.perf_counter()
        if self.scenario.save_models == "final":
            self._last_scored[device] = (round, state_arrays(model.state_dict()))
        forward = self.forward_flops(model)
        how = self.federation.evaluation(device, model, forward)
        if isinstance(how, JobEvaluation):
            self._score_by_job(device, round, how)
        else:
            future = self._test_set_job(device, model, how, forward)
            entry = self.recorder.evaluation_later(self.env.now, device, round)
            self._await(future, lambda score: self.recorder.fill_evaluation(entry, score))
        self.eval_wall_s += time.perf_counter() - t0

    def _test_set_job(self, device: int, model: nn.Module, how: TestSetEvaluation, forward: int) -> Future[Any]:
        """The evaluation job of ``model`` on ``device``'s test set, submitted now (the executor scores the model as
        it is now: a snapshot, or at once)."""
        return self.executor.submit(EvalJob(device, model, how.x, how.y, how.metric, threads=self.scenario.threads,
                                            flops=forward * int(how.y.shape[0])))

    def _grid(self, every_s: float) -> Generator[simpy.Event, Any, None]:
        """The evaluation grid (``p2pfl.sim.grid``): every device scored at t = 0, every online one at each
        multiple of ``every_s`` after, until the run ends. When nothing else is left to happen it stops, so a run
        that stalls is still reported as stalled."""
        k = 0
        while True:
            self._score_grid(everyone=k == 0)
            if self.env.peek() == math.inf:
                return
            k += 1
            yield self.env.timeout(max(k * every_s - self.env.now, 0.0))

    def _score_grid(self, everyone: bool) -> None:
        """One grid time: each device's current model (``Protocol.current_model``) scored on its test set as the
        protocol's evaluations are (no bytes, time or FLOPs charged), recorded apart from them (``Recorder.grid``);
        an offline device is skipped unless ``everyone`` (it keeps its last grid score), as is one the protocol
        has no model for yet."""
        t0 = time.perf_counter()
        rec, fleet, now = self.recorder, self.fleet, float(self.env.now)
        rec.grid_time(now)
        for d in range(self.n_devices):
            if not everyone and fleet is not None and not fleet.is_online(d):
                continue
            model = self.protocol.current_model(d)
            if model is None:
                continue
            forward = self.forward_flops(model)
            how = self.federation.evaluation(d, model, forward)
            assert isinstance(how, TestSetEvaluation)  # _check_grid
            future = self._test_set_job(d, model, how, forward)
            self._await(future, functools.partial(rec.fill_grid_evaluation, rec.grid_evaluation_later(now, d)))
        self.eval_wall_s += time.perf_counter() - t0

    def _score_by_job(self, device: int, round: Optional[int], how: JobEvaluation) -> None:
        """A federation's own scoring job (e.g. rollouts; another core may run it), memoised by ``how.key`` so
        a global model scored for many devices runs once; the first scoring pays the job's compute. Events are
        written in their places, completed when done. With an evaluation folder, a result an earlier run kept
        there is read instead of run (charged the same), and a result run here is kept."""
        future = self._scoring_jobs.get(how.key)
        cached = future is not None
        now, rate = self.env.now, self.profiles[device].flops_per_s
        keep, kept_as = (self.evaluations, how.kept) if not cached else (None, None)  # read or keep this result
        if future is None:
            found = None if keep is None or kept_as is None else keep.get(kept_as)
            if found is not None:
                keep = None  # read, not run: nothing to write
                future = Done(found)
            elif how.parts:  # one scoring on several cores: a job per part, the outcomes combined
                assert how.combine is not None  # JobEvaluation checks it
                share = how.flops // len(how.parts)
                future = Joined([self.executor.submit(CallJob(device, fn, args, threads=self.scenario.threads,
                                                              flops=share)) for fn, args in how.parts], how.combine)
            else:
                future = self.executor.submit(CallJob(device, how.fn, how.args, threads=self.scenario.threads,
                                                      flops=how.flops))
            if len(self._scoring_jobs) > 64:
                self._scoring_jobs.clear()
            self._scoring_jobs[how.key] = future
        charge = None if cached else self.recorder.compute_later(now, device, how.what)
        log = self.recorder.log_later(now, device, how.log, round=round, **how.fields, cached=cached)
        entry = self.recorder.evaluation_later(now, device, round)

        def fill(res: Any) -> None:
            if keep is not None and kept_as is not None:
                keep.put(kept_as, res)
            report = how.report(res, cached)
            if charge is not None:
                self.recorder.fill_compute(charge, report.flops, report.flops / rate)
            self.recorder.fill_log(log, report.score, **report.fields)
            self.recorder.fill_evaluation(entry, report.score)

        self._await(future, fill)

    def _await(self, future: Future[Any], fill: Callable[[Any], None]) -> None:
        """Complete ``fill`` with the job's result when it is done (in submit order; bounded)."""
        self._evals.append((future, fill))
        while len(self._evals) > _MAX_PENDING_EVALS:
            self._fill_oldest_eval()
        self._fill_ready_evals()

    def _fill_ready_evals(self) -> None:
        """Fill the oldest evaluations whose results are here (``Done``), and, with an evaluation folder, those
        whose jobs are back (``ready``, without waiting), so they are kept: a run cut off keeps every scoring
        result that was done by then."""
        while self._evals and (isinstance(f := self._evals[0][0], Done)
                               or (self.evaluations is not None and f.ready())):
            self._fill_oldest_eval()

    def _fill_oldest_eval(self) -> None:
        future, fill = self._evals.popleft()
        fill(future.result())

    # --- ground truth: what the protocols found, scored here (they never read the true clusters) ----------

    def report_clusters(self, t: float, node: int, clusters: Sequence[Sequence[int]], round: Optional[int],
                        log: bool) -> None:
        """A node's report of the federations found (``ctx.report_clusters``): scored, kept as a clustering
        event, and its ARI logged as ``ari`` by that node when ``log``."""
        scores = self.score_clusters(clusters)
        if log:
            self.recorder.log(t, node, "ari", scores["ari"], **({} if round is None else {"round": round}))
        self.clustering_events.append({"round": round, "t": t, **scores})

    def score_clusters(self, clusters: Sequence[Sequence[int]]) -> dict[str, Any]:
        """``clusters``, their ARI and misclassification rate against the true clusters, and their count."""
        from p2pfl.clustering.scores import clustering_scores  # the maths, imported by runs that cluster only

        return clustering_scores(tuple(self.federation.true_clusters), [list(c) for c in clusters])

    def clustering_summary(self) -> dict[str, Any]:
        """The summary's clustering fields: the protocol's final ``clusters()`` scored, the fields it names
        (``Protocol.cluster_fields``); ``clustering_events`` lists every report. Empty when it found none."""
        clusters = self.protocol.clusters()
        if clusters is None:
            return {}
        scores = {**self.score_clusters(clusters), "clustering_events": self.clustering_events}
        return {k: scores[k] for k in self.protocol.cluster_fields}

    def restart_scores(self) -> dict[str, Any]:
        """``restart_scores``: each restart's final clusters (``Protocol.restart_clusters``) scored against the true
        clusters (ARI, misclassification rate, federations, true groups merged: ``merged_groups``); empty for a
        protocol of one run."""
        found = self.protocol.restart_clusters()
        if found is None:
            return {}
        from p2pfl.clustering.scores import merged_groups

        truth = tuple(self.federation.true_clusters)
        out = []
        for clusters in found:
            scores = self.score_clusters(clusters)
            out.append({"ari": scores["ari"], "misclassification_rate": scores["misclassification_rate"],
                        "n_federations": scores["n_federations"], "merged_groups": merged_groups(truth, clusters)})
        return {"restart_scores": out}

    # --- running -----------------------------------------------------------------------------

    def _round_done(self) -> None:
        """A node ended a round (progress); after each fleet round's worth, the free heap goes back to the
        system (``p2pfl.sim.heap``). Scoring results back by now are kept (``_fill_ready_evals``)."""
        self._rounds_done += 1
        if self._rounds_done % self.recorder.n_nodes == 0:
            heap.release_free_heap()
        self._fill_ready_evals()
        if self._on_round is not None:
            self._on_round()

    def _contexts(self) -> tuple[list[DeviceContext], list[ServerContext]]:
        g = self.topology.graph
        attached: dict[int, list[int]] = {i: [] for i in range(self.n_devices)}
        servers = []
        for sid, spec in zip(self.server_ids, self.topology.servers):
            for d in spec.attached:
                attached[d].append(sid)
            servers.append(ServerContext(self, sid, spec.name, tuple(spec.attached), stream(self.seed, "node", sid),
                                         node_generator(self.seed, sid)))
        devices = [
            DeviceContext(self, i, tuple(sorted(g.neighbors(i))), stream(self.seed, "node", i),
                          node_generator(self.seed, i), self.federation.shards[i], self.profiles[i],
                          tuple(attached[i]))
            for i in range(self.n_devices)
        ]
        return devices, servers

    def progress_total(self) -> int:
        """``on_round`` calls of a whole run (the protocol's count)."""
        return self.protocol.progress_total()

    def run(self) -> dict[str, Any]:
        """Run to completion and return the summary (see ``summary``)."""
        t0 = time.perf_counter()
        try:
            with torch_threads(self.scenario.threads), few_collections():
                return self._run(t0)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the executor's workers unless the caller passed it in, and close the event stream
        (idempotent; ``run`` does it when it ends)."""
        if self._owns_executor:
            self.executor.close()
        if self._events_file is not None:
            self._events_file.close()

    def _run(self, t0: float) -> dict[str, Any]:
        devices, servers = self._contexts()
        dyn = self.scenario.dynamics
        if dyn is not None and self.fleet is not None:  # first: changes at t=0 come before any device acts
            self.mover = start_dynamics(self.env, self.fleet, dyn, self.dynamics_seed, self.topology.graph,
                                        groups=tuple(self.federation.true_clusters))
        dev_procs = [self.env.process(self.protocol.device(c)) for c in devices]
        with_server = self.protocol.requires_server()
        srv_procs = [self.env.process(self.protocol.server(c)) for c in servers] if with_server else []
        if self.grid_every_s is not None:  # after the protocol's processes: at t = 0 they have made their models
            self.env.process(self._grid(self.grid_every_s))
        main = srv_procs if with_server else dev_procs
        done: simpy.Event = simpy.AllOf(self.env, main)
        if dyn is not None:
            finish = self.env.event()

            def finished(_: simpy.Event) -> None:
                if not finish.triggered:
                    finish.succeed()

            done.callbacks.append(finished)
            self.env.process(self._watchdog(finish, main, with_server, dyn.stall_after_s))
            done = finish
        try:
            self.env.run(until=done)
        except RuntimeError as err:
            if "No scheduled events left" not in str(err):
                raise
            raise SimulationStalled(
                f"simulation stalled at t={self.env.now:.6g}s: nodes wait for messages that will never come "
                "(lost on a lossy link?); set protocol.reply_timeout_s or protocol.round_timeout_s") from None
        t_wait = time.perf_counter()
        while self._evals:
            self._fill_oldest_eval()
        self.recorder.close()
        self.eval_wall_s += time.perf_counter() - t_wait
        self.run_wall_s = time.perf_counter() - t0
        return self.summary()

    def _watchdog(self, finish: simpy.Event, main: list[simpy.Process], with_server: bool,
                  stall_after_s: float) -> Any:
        """Under dynamics the clock never runs out of events (churn goes on), so a stall shows as
        ``stall_after_s`` of simulated time without a protocol event. If every unfinished device is
        offline then, the run ends (they left the fleet: ``left_fleet``); otherwise it is a stall."""
        assert self.fleet is not None
        seen = -1
        while True:
            yield self.env.timeout(stall_after_s)
            count = self.recorder.n_events - self.fleet.n_events - self.recorder.grid_events
            if count != seen:
                seen = count
                continue
            stuck = [i for i, p in enumerate(main) if p.is_alive]
            if not with_server and all(not self.fleet.is_online(i) for i in stuck):
                self.left_fleet = tuple(stuck)
                finish.succeed()
                return
            raise SimulationStalled(
                f"simulation stalled at t={self.env.now:.6g}s: no protocol event for {stall_after_s:g} simulated "
                f"seconds while {len(stuck)} nodes still run (a message awaited without a deadline?); "
                "set the protocol's timeout, or dynamics.stall_after_s if the protocol idles that long")

    def summary(self) -> dict[str, Any]:
        """The deterministic summary.json content (built in ``p2pfl.metrics.summary``)."""
        head = {"scenario": self.scenario.name, "protocol": self.protocol.name, "seed": self.seed,
                "rounds": self.scenario.protocol.rounds}
        tail = {"true_clusters": list(self.federation.true_clusters), "partition": self.federation.stats(),
                "messages_in_flight": len(self.network.in_flight), **self.dynamics_summary(),
                **self.clustering_summary(), **self.restart_scores(), **self.protocol.result()}
        energy = EnergyModel(send_j_per_bit=tuple(p.send_j_per_bit for p in self.profiles),
                             receive_j_per_bit=tuple(p.receive_j_per_bit for p in self.profiles),
                             j_per_flop=tuple(p.j_per_flop for p in self.profiles))
        totals = recorder_totals(self.recorder, metric=self.metric, n_devices=self.n_devices,
                                 server_names=tuple(s.name for s in self.topology.servers))
        return build_summary(totals, metric=self.metric, head=head, sim_time_s=self.env.now, tail=tail, energy=energy,
                             score_fields=self.federation.score_fields)

    def dynamics_summary(self) -> dict[str, Any]:
        """``dynamics``: per-device availability (share of the run online), offline periods, link
        failures and devices that left for good (empty for a static fleet)."""
        fleet = self.fleet
        if fleet is None:
            return {}
        avail = fleet.availability()
        return {"dynamics": {
            "availability_mean": float(avail.mean()),
            "availability_per_node": [float(a) for a in avail],
            "offline_periods_per_node": [int(k) for k in fleet.offline_periods],
            "link_down_events": fleet.link_down_events,
            "left_fleet": list(self.left_fleet),
            **({"mean_radius_degree": fleet.mean_degree()} if self.mover is not None else {}),
        }}

    def artifacts(self) -> dict[str, bytes]:
        """Extra files of the run: the protocol's; its novelty matrix (``novelty.npy``) and heatmap, ordered
        by the true clusters; under mobility ``positions.npz`` (``t``: frame times, ``pos``: (frames,
        devices, 2) positions); with ``save_models: final``, ``models.npz`` (``p2pfl.learning.saved``)."""
        out = dict(self.protocol.artifacts())
        novelty = self.protocol.novelty()
        if novelty is not None:
            from p2pfl.clustering.novelty import novelty_artifacts  # drawn by runs that build a matrix only

            matrix, title = novelty
            out.update(novelty_artifacts(matrix, tuple(self.federation.true_clusters), title))
        if self.mover is not None:
            buf = io.BytesIO()
            np.savez_compressed(buf, t=np.asarray(self.mover.frame_times), pos=np.stack(self.mover.frames))
            out["positions.npz"] = buf.getvalue()
        if self.scenario.save_models == "final":
            out[MODELS_FILE] = pack_models(self._last_scored, self.n_devices)
        return out

    def timing(self) -> dict[str, float]:
        """Measured wall-clock figures (never steer the simulation); with workers, ``train_wall_s`` and
        ``eval_wall_s`` are the seconds this process spent handing jobs over and awaiting them. With the
        batched executor, ``stacked_jobs``: the jobs that trained inside a stacked group (the others trained
        alone: the jobs overlapped too little in simulated time, e.g. a server's staggered broadcast). With an
        evaluation folder that served, ``evaluations_read`` / ``evaluations_kept``: scoring results read from it
        and written to it."""
        run = self.run_wall_s
        stacked = getattr(self.executor, "stacked_jobs", None)
        kept = self.evaluations
        return {
            "build_wall_s": self.build_wall_s,
            "run_wall_s": run,
            "train_wall_s": self.train_wall_s,
            "eval_wall_s": self.eval_wall_s,
            "kernel_wall_s": max(run - self.train_wall_s - self.eval_wall_s, 0.0),
            "events": self.recorder.n_events,
            "sim_events": self.sim_events,
            **({} if stacked is None else {"stacked_jobs": stacked}),
            **({} if kept is None or not (kept.read or kept.written) else
               {"evaluations_read": kept.read, "evaluations_kept": kept.written}),
        }

    @property
    def sim_events(self) -> int:
        """SimPy events scheduled so far (the environment numbers each one it queues)."""
        count = self.env._eid  # an itertools.count: its repr holds the next number, read without taking it
        return int(repr(count)[6:-1])


def build_only(scenario: Scenario) -> Simulation:
    """Build ``scenario`` as a run would (topology, data, network, protocol and their checks) without
    running it or starting executor workers (``p2pfl validate``, ``p2pfl sweep --dry-run``)."""
    from p2pfl.executors.inline import InlineExecutor

    sim = Simulation(scenario, executor=InlineExecutor())
    sim.close()
    return sim


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block at ``n`` torch intra-op threads, then restore the caller's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """Run the block with the world built so far frozen out of Python's cyclic collector and young
    collections every ``GC_GEN0`` allocations, then restore the caller's settings.

    A fleet is millions of long-lived objects; at the default settings every full collection walks all of
    them, which was 40% of a gossip run of 10,000 devices (measured on a loaded machine: 56 s -> 37 s). Frozen objects
    are still freed by reference counting; only cycles among them wait until the block ends. Results do not
    depend on when the collector runs (tested: same bytes).
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _slots(capacity_bps: float | None, link_bps: float) -> int:
    """Transfers a server's capacity carries at once at its links' bandwidth (one when not given)."""
    return 1 if capacity_bps is None else max(1, math.floor(capacity_bps / link_bps))
