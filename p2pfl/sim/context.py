"""Node contexts: the only door a protocol has to the simulated world.

Every verb is a SimPy event or a sub-generator, so protocol code reads as the
algorithm: ``yield ctx.send(...)``, ``msg = yield ctx.recv(kind, until=deadline)``,
``got = yield from ctx.collect(kind, round, senders, until)``, ``result = yield from ctx.train(model)``.
Waiting belongs here: a protocol states a deadline (a simulated time), never the time left to it.
What a protocol finds, it reports (``report_clusters``); the kernel scores it against the ground truth.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Generator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeVar, overload

import numpy as np
import simpy
import torch
from torch import nn

from p2pfl.executors.jobs import CallJob, Job, TrainJob
from p2pfl.learning.aggregate import clone_state, sub
from p2pfl.learning.flat import FlatState
from p2pfl.learning.state import add_delta_, live_state, load_state_
from p2pfl.learning.train import BatchLoss, Penalty, TrainResult
from p2pfl.sim.cost import message_bytes, payload_bytes, train_flops
from p2pfl.sim.deferred import DeferredState, settle
from p2pfl.sim.profiles import DeviceProfile

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data import Federation, Shard
    from p2pfl.data.shards import Samples
    from p2pfl.executors.base import Executor
    from p2pfl.learning.train import TrainingSpec
    from p2pfl.metrics.recorder import Recorder
    from p2pfl.sim.dynamics import Fleet
    from p2pfl.sim.network import Message, Network
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["NodeContext", "DeviceContext", "ServerContext", "World"]

T = TypeVar("T")


class World(Protocol):
    """What a context reaches of the running simulation (``p2pfl.sim.kernel.Simulation`` is one): the
    clock, the network, the recorder, the live fleet, the executor and a few kernel services. Named here,
    so the contexts do not depend on the kernel that builds them."""

    @property
    def env(self) -> simpy.Environment: ...
    @property
    def run_info(self) -> RunInfo: ...
    @property
    def network(self) -> Network: ...
    @property
    def recorder(self) -> Recorder: ...
    @property
    def fleet(self) -> Optional[Fleet]: ...
    @property
    def federation(self) -> Federation: ...
    @property
    def training(self) -> TrainingSpec: ...
    @property
    def threads(self) -> int: ...
    @property
    def executor(self) -> Executor: ...
    @property
    def interrupted_training(self) -> str: ...
    @property
    def defer_uploads(self) -> bool: ...

    #: Seconds of this process spent handing jobs over and awaiting them (contexts add to it).
    train_wall_s: float

    def new_model(self, node: Optional[int] = None) -> nn.Module: ...
    def forward_flops(self, model: nn.Module) -> int: ...
    def evaluate_on(self, device: int, model: nn.Module, round: Optional[int]) -> None: ...
    def report_clusters(self, t: float, node: int, clusters: Sequence[Sequence[int]], round: Optional[int],
                        log: bool) -> None: ...


def _snapshot(payload: Any) -> Any:
    """Deep copy of the tensors in a payload, so the sender can keep training."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, FlatState):
        return payload.clone()
    if isinstance(payload, dict):
        return {k: _snapshot(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_snapshot(v) for v in payload)
    if isinstance(payload, np.ndarray):
        return payload.copy()
    return payload


class NodeContext:
    """What every node (device or server) may do.

    ``run`` is the read-only description of the run (ids, graph, task facts,
    per-purpose seeds); everything else a node learns comes through ``recv``.
    """

    def __init__(self, sim: World, node_id: int, neighbors: tuple[int, ...], rng: np.random.Generator,
                 torch_gen: torch.Generator) -> None:
        self._sim = sim
        self._env = sim.env
        self.run: RunInfo = sim.run_info
        self.id = node_id
        self.neighbors = neighbors
        self.rng = rng
        self.torch_gen = torch_gen
        self._timer: Optional[simpy.Timeout] = None  # the last deadline's timer (``recv(until=)``)
        self._timer_until = 0.0

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self._env.now

    def send(self, dst: int, kind: str, payload: Any, round: int = 0, routed: bool = False,
             share: bool = False) -> simpy.Event:
        """Transfer ``payload`` to ``dst``; the event fires when this node's uplink is free again.

        The payload is snapshotted now, so the sender may keep changing its model.
        ``routed=True`` relays to a non-neighbour over a shortest path (bytes counted per hop).
        ``share=True`` sends the payload as it is, not copied: for a fresh snapshot sent to many peers
        (a round's model), which neither the sender nor any receiver changes afterwards; N peers then
        hold one copy instead of N (the bytes counted are the same).
        """
        return self._sim.network.send(self.id, dst, kind, payload if share else _snapshot(payload), round, routed)

    def transfer_s(self, dst: int, payload: Any, routed: bool = False) -> float:
        """Seconds ``payload`` would take to reach ``dst`` over the links with every uplink free (no queue)."""
        return self._sim.network.transfer_s(self.id, dst, message_bytes(payload), routed)

    def recv(self, kind: str, timeout: Optional[float] = None, *, until: Optional[float] = None) -> simpy.Event:
        """Next message of ``kind`` for this node.

        With a deadline, ``until`` (a simulated time) or ``timeout`` (seconds from now), the value is
        None if none came by then; a deadline already past still takes a message that is waiting.
        """
        if until is not None and timeout is not None:
            raise TypeError("recv: give a timeout or a deadline (until), not both")
        get = self._sim.network.inbox(self.id, kind).get()
        if (timeout is None and until is None) or get.triggered:  # no deadline, or a message is waiting: take it
            return get
        if until is None:
            assert timeout is not None
            return self._first_of(get, self._env.timeout(timeout))
        timer = self._timer
        if timer is None or self._timer_until != until:  # one timer per deadline, for every recv until it
            timer = self._timer = self._env.timeout(max(until - self.now, 0.0))
            self._timer_until = until
        if timer.processed:  # the deadline has passed and nothing is waiting
            get.cancel()
            return self._env.event().succeed(None)
        return self._first_of(get, timer)

    @overload
    def deadline(self, seconds: float) -> float: ...
    @overload
    def deadline(self, seconds: None) -> None: ...
    @overload
    def deadline(self, seconds: Optional[float]) -> Optional[float]: ...

    def deadline(self, seconds: Optional[float]) -> Optional[float]:
        """The simulated time ``seconds`` from now, to wait until (None, no deadline, when ``seconds`` is None)."""
        return None if seconds is None else self.now + seconds

    def collect(self, kind: str, round: int, senders: Collection[int], until: Optional[float] = None, *,
                after_first: Optional[float] = None, keep_later: Optional[dict[int, dict[int, Message]]] = None,
                each: Optional[Callable[[Message], None]] = None,
                origin: Optional[Callable[[Message], int]] = None) -> Generator[Any, Any, dict[int, Message]]:
        """Round ``round``'s ``kind`` messages from ``senders``: ``{sender: message}`` in arrival order.

        The step every round-based protocol has: wait until each of ``senders`` has answered, or
        until the deadline ``until`` (a simulated time; None: no deadline) has passed, and go on with
        what came (a lost or late message is skipped). A message of an earlier round is stale and
        dropped; a later sender's message replaces its earlier one.

        - ``after_first``: the deadline is this many seconds after the first sender's message (for a
          phase whose length the receiver cannot know, e.g. peers training before they answer).
        - ``keep_later``: a message of a later round is kept there (``{round: {sender: message}}``)
          and taken by the collect of its round (synchronous rounds, where a fast peer may be ahead);
          without, it is dropped. Without a deadline, an earlier round's message cannot come in a
          synchronous protocol: it is a bug and raises.
        - ``each(message)`` is called on every message of the round as it arrives, whoever sent it
          (a relay forwards it at once; a node records what others than ``senders`` said).
        - ``origin(message)``: who a message speaks for (default its ``src``; a relayed one names its owner).
        """
        expected = set(senders)
        got: dict[int, Message] = {}
        deadline = until
        first = True

        def take(msg: Message) -> None:
            nonlocal deadline, first
            if each is not None:
                each(msg)
            who = msg.src if origin is None else origin(msg)
            if who in expected:
                got[who] = msg
                if first and after_first is not None:
                    start = self.now + after_first
                    deadline = start if deadline is None else min(deadline, start)
                first = False

        if keep_later is not None:
            for early in keep_later.pop(round, {}).values():
                take(early)
        while not expected <= got.keys():
            msg: Optional[Message] = yield self.recv(kind, until=deadline)
            if msg is None:
                break
            if msg.round == round:
                take(msg)
            elif msg.round > round and keep_later is not None:
                keep_later.setdefault(msg.round, {})[msg.src] = msg
            elif msg.round < round and keep_later is not None and deadline is None:
                raise RuntimeError(f"node {self.id} got a round-{msg.round} {kind!r} message in round {round}")
        t0 = time.perf_counter()
        for msg in got.values():  # uploads whose training was deferred are read now, the round's together
            settle(msg.payload)
        self._sim.train_wall_s += time.perf_counter() - t0
        return got

    def newest(self, msg: Any, kind: str) -> Any:
        """``msg`` or, if later ``kind`` messages are already waiting in the inbox, the last of them
        (taken out): a device that was away catches up with the current round."""
        store = self._sim.network.inbox(self.id, kind)
        while store.items:
            msg = store.items.pop(0)
        return msg

    def _first_of(self, get: simpy.resources.store.StoreGet, timer: simpy.Timeout) -> simpy.Event:
        """An event with the message ``get`` takes, or None when ``timer`` fires first (the get is then
        withdrawn: a later message stays in the inbox). No helper process: two callbacks.

        A message that comes first takes the timer's callback off it: that callback holds the message, and
        a timer outlives the wait by up to its whole timeout (gossip's reply timeout at N = 10,000 spans
        about a hundred rounds: every device's replies of those rounds, 100 kB each, were held to the end).
        """
        done = self._env.event()

        def got(event: simpy.Event) -> None:
            if not done.triggered:
                done.succeed(event.value)
            if timer.callbacks is not None:  # not fired yet (its callbacks are None once it has)
                timer.callbacks.remove(expired)

        def expired(_: simpy.Event) -> None:
            if not done.triggered:
                get.cancel()
                done.succeed(None)

        get.callbacks.append(got)
        timer.callbacks.append(expired)
        return done

    def sleep(self, seconds: Optional[float] = None, *, until: Optional[float] = None) -> simpy.Event:
        """Idle for ``seconds`` of simulated time, or until the simulated time ``until`` (now, if it is
        past); an offline device's next send or compute waits until it is back, so sleeping needs no gate."""
        if until is not None and seconds is None:
            return self._env.timeout(max(until - self.now, 0.0))
        if seconds is None or until is not None:
            raise TypeError("sleep: give seconds or a time to sleep until, one of them")
        return self._env.timeout(seconds)

    @property
    def live_neighbors(self) -> tuple[int, ...]:
        """The neighbours reachable now: online, link up, not cut off by a partition (sorted ids).

        What a device's radio or link layer reports (beacons); ``neighbors`` stays the static graph.
        Under mobility these are the devices within radio range. Without dynamics: ``neighbors``.
        """
        fleet = self._sim.fleet
        return self.neighbors if fleet is None else fleet.live_neighbors(self.id)

    def signal(self) -> simpy.Event:
        """A fresh event for one of this node's processes to fire (``succeed()``) and another to wait on."""
        return self._env.event()

    def neighborhood_change(self) -> simpy.Event:
        """An event that fires when ``live_neighbors`` next changes (never, for a static fleet)."""
        fleet = self._sim.fleet
        return self._env.event() if fleet is None else fleet.neighborhood_change(self.id)

    def live_within(self, hops: int) -> tuple[int, ...]:
        """Devices within ``hops`` hops over live links now, this node excluded (sorted); the static
        graph's for a static fleet. What a routing layer knows, as ``live_neighbors`` is what the radio knows."""
        fleet = self._sim.fleet
        graph = self.run.graph
        seen = {self.id}
        frontier = [self.id]
        for _ in range(hops):
            nxt = []
            for u in frontier:
                for v in (fleet.live_neighbors(u) if fleet is not None else graph.neighbors(u)):
                    if v not in seen:
                        seen.add(v)
                        nxt.append(v)
            frontier = nxt
        seen.discard(self.id)
        return tuple(sorted(int(v) for v in seen))

    @property
    def dynamic(self) -> bool:
        """Does the fleet change during the run (a ``dynamics:`` block)?"""
        return self._sim.fleet is not None

    def spawn(self, generator: Generator[Any, Any, Any]) -> simpy.Process:
        """Run a helper process of this node (e.g. a responder) alongside its main loop."""
        return self._env.process(generator)

    def log(self, name: str, value: Any, **fields: Any) -> None:
        """Record a protocol-specific metric."""
        self._sim.recorder.log(self.now, self.id, name, value, **fields)

    def report_clusters(self, clusters: Sequence[Sequence[int]], round: Optional[int] = None, *,
                        log: bool = True) -> None:
        """Report the federations found as of now (lists of device ids, every device once).

        The kernel scores them against the true clusters, which a protocol never reads: their ARI is
        logged as ``ari`` (``log``; with ``round``) and the report is kept with its scores as one of the
        run's clustering events. Nothing comes back: a protocol must not steer by ground truth.
        The summary's ``clusters`` and scores are those of ``Protocol.clusters()`` at the end.
        """
        self._sim.report_clusters(self.now, self.id, clusters, round, log)

    def round_done(self, round: int) -> None:
        """Mark the end of a round of this node (progress and the event log)."""
        self._sim.recorder.round_done(self.now, self.id, round)

    def new_model(self, independent: bool = False) -> nn.Module:
        """The scenario's model: the common initial weights, or this node's own seeded ones."""
        return self._sim.new_model(self.id if independent else None)

    def forward_flops(self, model: nn.Module) -> int:
        """Modelled forward FLOPs per sample of ``model`` on this task's inputs (cached per model)."""
        return self._sim.forward_flops(model)

    def evaluate_device(self, device: int, model: nn.Module, round: Optional[int] = None) -> None:
        """Score ``model`` on ``device``'s local test set (a measurement: no bytes, no time).

        The score is the run's metric: accuracy, RMSE for regression, rollout success for robots.
        It goes to the results only: a protocol must not steer by test-set scores, so none is
        returned (and the evaluation may run on another core while the simulation goes on).
        """
        self._sim.evaluate_on(device, model, round)


class DeviceContext(NodeContext):
    """A device: owns a data shard, a profile and real local training."""

    def __init__(self, sim: World, node_id: int, neighbors: tuple[int, ...], rng: np.random.Generator,
                 torch_gen: torch.Generator, shard: Shard, profile: DeviceProfile, servers: tuple[int, ...]) -> None:
        super().__init__(sim, node_id, neighbors, rng, torch_gen)
        self.shard = shard
        self.profile = profile
        self.servers = servers
        self._deferred: Optional[DeferredState] = None  # this device's latest upload not read yet

    @property
    def true_cluster(self) -> int:
        """Ground truth, for scoring only (protocols other than ``oracle`` must not read it)."""
        return self.shard.true_cluster

    @property
    def n_samples(self) -> int:
        """Training samples on this device."""
        return int(self.shard.train_y.shape[0])

    def train(self, model: nn.Module, *, epochs: Optional[int] = None, lr: Optional[float] = None,
              momentum: Optional[float] = None, penalty: Optional[Penalty] = None,
              x: Optional[torch.Tensor] = None, y: Optional[torch.Tensor] = None,
              loss: Optional[BatchLoss] = None, delta: bool = False) -> Generator[Any, Any, TrainResult]:
        """Train ``model`` on this device's shard; advance time by FLOPs / FLOP rate.

        The job starts from the model and generator as they are now; its outcome (new
        weights, generator state) is applied when the simulated training time is over,
        and meanwhile the job may run on another core. ``loss(model, x, y)`` replaces the
        batch loss (its extra compute is the caller's to charge); a penalty or loss must be
        picklable (a module-level function or callable object) for the process and Ray executors.
        ``delta=True`` adds the job's change (trained - started from) to the live model instead of
        replacing it, keeping whatever happened to the model meanwhile (gossip averaging while it
        trains); the model's train/eval mode is then left alone.
        """
        sim = self._sim
        self._read_deferred()
        build = functools.partial(self._train_job, model, x, y, epochs=epochs, lr=lr, momentum=momentum,
                                  penalty=penalty, loss=loss, delta=delta)
        job, outcome = yield from self._run_job(build, "train")
        t0 = time.perf_counter()
        start = job.state
        if start is not None:
            new = outcome.state
            if isinstance(start, FlatState) and not (isinstance(new, FlatState) and new.layout == start.layout):
                new = FlatState(start.layout.pack(new), start.layout)
            add_delta_(model, sub(new, start))
            self.torch_gen.set_state(outcome.generator_state)
        elif job.samples:
            load_state_(model, outcome.state)
            self.torch_gen.set_state(outcome.generator_state)
            model.train()  # as training left it
        sim.train_wall_s += time.perf_counter() - t0
        return outcome.result

    @property
    def defers_uploads(self) -> bool:
        """Whether the scenario defers uploads (``executor: {defer_uploads: true}``; ``deferred_train``)."""
        return self._sim.defer_uploads

    def deferred_train(self, model: nn.Module) -> Generator[Any, Any, DeferredState]:
        """``train(model)`` for an upload to a server, its outcome read when the server takes it
        (``p2pfl.sim.deferred``): the state to send (sized now, its values fetched then). ``model`` keeps
        its values: the caller sends the returned state and loads the server's next model before it reads
        ``model`` again. This device's generator takes the job's state when the outcome is read, at the
        latest before this device's next job."""
        self._read_deferred()
        live = live_state(model)
        _, future = yield from self._run_job(functools.partial(self._train_job, model), "train", defer=True)
        deferred = DeferredState(future, live.layout if isinstance(live, FlatState) else None, payload_bytes(live),
                                 self._took_deferred)
        self._deferred = deferred
        return deferred

    def _train_job(self, model: nn.Module, x: Optional[Samples] = None, y: Optional[torch.Tensor] = None, *,
                   epochs: Optional[int] = None, lr: Optional[float] = None, momentum: Optional[float] = None,
                   penalty: Optional[Penalty] = None, loss: Optional[BatchLoss] = None,
                   delta: bool = False) -> tuple[TrainJob, int]:
        """The training job of ``train`` / ``deferred_train``, from the model and generator as they are now
        (this device's shard unless ``x`` / ``y`` are given), and its modelled FLOPs."""
        sim = self._sim
        job = TrainJob(self.id, model, self.shard.held("train_x") if x is None else x,
                       self.shard.train_y if y is None else y, sim.training, self.torch_gen,
                       threads=sim.threads, epochs=epochs, lr=lr, momentum=momentum, penalty=penalty, loss=loss)
        job.flops = flops = train_flops(sim.forward_flops(model), job.samples)
        job.state = clone_state(live_state(model)) if delta and job.samples else None
        return job, flops

    def _took_deferred(self, deferred: DeferredState, outcome: Any) -> None:
        """A deferred outcome was read: this device's generator moves on as the job left it."""
        if self._deferred is deferred:
            self.torch_gen.set_state(outcome.generator_state)
            self._deferred = None

    def _read_deferred(self) -> None:
        """Read this device's deferred outcome, if the server has not (its generator state is needed now)."""
        if self._deferred is not None:
            t0 = time.perf_counter()
            self._deferred.value()
            self._sim.train_wall_s += time.perf_counter() - t0

    def pooled_shards(self) -> tuple[Shard, ...]:
        """Every device's shard, for the pooled references only (``centralized``, Conditional's
        ``pooled`` mode), which model a data centre holding all data; they account its upload themselves."""
        return self._sim.federation.shards

    def pooled_validation(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """The data's held-out validation samples (``Federation.validation_set``), for the pooled references'
        choice of a checkpoint (``centralized``'s ``checkpoint: best_val_nll``); None where the data hold none."""
        return self._sim.federation.validation_set()

    def work(self, fn: Callable[..., T], *args: Any, flops: int, what: str) -> Generator[Any, Any, T]:
        """Run ``fn(*args)`` as a job and charge ``flops`` of modelled compute; its value at completion.

        Like ``train``, the job may run on another core while simulated time passes. ``fn`` must be
        a module-level function of picklable arguments, and the caller must use its return value
        (not changes to the arguments, which stay in a worker).
        """
        sim = self._sim
        _, value = yield from self._run_job(
            lambda: (CallJob(self.id, fn, args, threads=sim.threads, flops=flops), flops), what)
        return value

    def _run_job(self, build: Callable[[], tuple[Job, int]], what: str,
                 defer: bool = False) -> Generator[Any, Any, tuple[Any, Any]]:
        """The one path of a job (``train``, ``work``): ``build()`` makes it from the state as it is now
        (and its modelled FLOPs); the executor gets it at once, this device is charged its compute, and its
        outcome is taken when the simulated time is over. Work lost by going offline
        (``interrupted_training: lost``) is submitted again, from the state then, once the device is back.
        Returns the job and its outcome (``defer``: its future, not awaited); the seconds spent handing over
        and awaiting count as ``train_wall_s``."""
        sim = self._sim
        while True:
            t0 = time.perf_counter()
            job, flops = build()
            future = sim.executor.submit(job)
            sim.train_wall_s += time.perf_counter() - t0
            done = yield from self._compute(flops, what)
            if done and defer:
                return job, future
            t0 = time.perf_counter()
            outcome = future.result()
            sim.train_wall_s += time.perf_counter() - t0
            if done:
                return job, outcome

    def compute(self, flops: int, what: str) -> Generator[Any, Any, None]:
        """Charge ``flops`` of modelled compute to this device (time = FLOPs / FLOP rate).

        Under dynamics the rate follows the device's straggler factor, and going offline pauses
        the compute (``interrupted_training: resumed``) or wastes it and starts over when the
        device is back (``lost``; the wasted FLOPs are charged as ``lost:<what>``).
        """
        while not (yield from self._compute(flops, what)):
            pass

    def _compute(self, flops: int, what: str) -> Generator[Any, Any, bool]:
        """``compute``, but return False (once back online) when the work was lost by going offline."""
        fleet = self._sim.fleet
        rate = self.profile.flops_per_s
        if fleet is None:
            sim_s = flops / rate
            self._sim.recorder.compute(self.now, self.id, flops, sim_s, what)
            yield self._env.timeout(sim_s)
            return True
        me, rec = self.id, self._sim.recorder
        yield from fleet.wait_online(me)
        left, busy = float(flops), 0.0
        while left > 0:
            speed = rate * float(fleet.rate_factor[me])
            t = self.now
            proc = self._env.active_process
            assert proc is not None
            fleet.computing.setdefault(me, []).append(proc)  # going offline or a new rate interrupts it
            try:
                yield self._env.timeout(left / speed)
                left = 0.0
            except simpy.Interrupt:
                left = max(left - (self.now - t) * speed, 0.0)
            finally:
                fleet.computing[me].remove(proc)
            busy += self.now - t
            if left > 0 and not fleet.is_online(me):
                if self._sim.interrupted_training == "lost":
                    rec.compute(self.now, me, int(flops - left), busy, f"lost:{what}")
                    yield from fleet.wait_online(me)
                    return False
                yield from fleet.wait_online(me)
        rec.compute(self.now, me, flops, busy, what)  # under dynamics: recorded when done (its time is known then)
        return True

    def evaluate(self, model: nn.Module, round: Optional[int] = None) -> None:
        """Score ``model`` on this device's local test set (the run's metric), recorded for this device
        (see ``evaluate_device``)."""
        self._sim.evaluate_on(self.id, model, round)


class ServerContext(NodeContext):
    """A server node: attached to some devices; evaluates on their test sets for scoring."""

    def __init__(self, sim: World, node_id: int, name: str, devices: tuple[int, ...], rng: np.random.Generator,
                 torch_gen: torch.Generator) -> None:
        super().__init__(sim, node_id, devices, rng, torch_gen)
        self.name = name
        self.devices = devices
