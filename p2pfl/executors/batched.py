"""The batched executor: models of one architecture whose jobs are pending together train as one.

Jobs wait until the first of them is awaited (at its completion time); then every
pending job is grouped by architecture and settings, and each group of k models is
trained as one stacked model: ``torch.func.functional_call`` under ``vmap`` over
parameters stacked on a new leading dimension, one forward and backward per step for
all k. Each model keeps its own batch order (drawn from its own generator, as
``train_local`` draws it), its own momentum and its own loss; the SGD step is the same
element-wise update on the stacked tensors. So a step of k small models costs about one
Python step instead of k.

Not bitwise equal to ``inline``: a vmapped layer runs as a batched matmul or grouped
convolution, whose float reductions are ordered differently. Tolerance (tested): after
one local job every weight is within ``ATOL + RTOL * |w|`` of inline's (1e-5, 1e-4), and
a whole run's mean accuracy within 0.02. With BatchNorm (``CNN32``) the gap grows with the steps
on some CPUs: on an AMD EPYC core it measured 1.8e-4 after two SGD steps and 7.0e-4 after four
(running statistics alone: 6e-8), so such models are held to ``BN_ATOL`` instead.
Jobs this cannot stack run as ``inline`` runs them: a penalty or custom loss, a model with
its own ``loss`` (robot policies), dropout, AdamW, gradient clipping, a model with state
outside its state dict (Conditional's statistics, a non-persistent buffer; hooks), or a
group of one.

``ctx.work`` calls whose function is marked stackable (:func:`p2pfl.executors.jobs.stacks`,
e.g. RND predictor fits) wait and group the same way, and each group runs through the
function's own stacked form, within that function's stated tolerance.

Given a ``pool`` (``make_executor`` gives it a :class:`~p2pfl.executors.process.ProcessExecutor`
with a slot per core, this process one of them), the work that is not a stacked training group
(evaluations, calls, the stacked calls' slices) runs there: the same bits as running it here (a
job carries its thread count), on every core. A job whose modelled FLOPs are under ``INLINE_FLOPS``
(a small model's evaluation) runs here instead: shipping it would cost more than running it.
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, cast

import torch
from torch import nn
from torch.func import functional_call, vmap

from p2pfl.data.shards import PoolRows
from p2pfl.executors.base import Deferred, Executor, Future
from p2pfl.executors.inline import InlineExecutor
from p2pfl.executors.jobs import CallJob, Job, TrainJob, TrainOutcome, stacking_of
from p2pfl.learning.aggregate import clone_state
from p2pfl.learning.batches import batch_order
from p2pfl.learning.clone import clone_module, is_plain
from p2pfl.learning.flat import FlatState, Layout
from p2pfl.learning.rows import ModelTable, RowModel
from p2pfl.learning.stacked_sgd import stacked_sgd
from p2pfl.learning.state import live_state
from p2pfl.learning.train import TrainResult, task_loss

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data import Shard

__all__ = ["BatchedExecutor", "ATOL", "RTOL", "BN_ATOL", "stackable", "model_stacks", "run_stacked"]

#: Tolerance of a batched job's weights against inline's after one local job.
ATOL, RTOL = 1e-5, 1e-4
BN_ATOL = 2e-3  # models with BatchNorm (see the module docstring)
#: The most jobs trained as one stacked model (at least 4); a larger group trains in near-equal slices, with
#: the same bits (tested): a pending job holds its snapshot until its slice trains, so the memory of a
#: round in which every device trains at once is bounded by the slice, not the fleet (measured, MLP of the
#: headline study: about 0.75 MB per job of a slice; all 10,000 devices at once would take 7.5 GB).
MAX_GROUP = 256
#: Slices of grouped calls sent to the pool and not yet back, at most (two per slot on two cores).
IN_FLIGHT = 4
#: A job that does not stack runs here, not in the pool, when its modelled FLOPs are below this: sending it
#: to a worker (a fleet row's module made and pickled) costs this process more than the job. Measured,
#: rnd_gossip h1 at N = 10,000: packing the headline MLP's evaluations (5 MFLOP each) was 7% of the kernel's
#: time, the evaluation itself a fraction of a millisecond.
INLINE_FLOPS = 2e7

_NO_STACK = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


def stackable(job: TrainJob) -> bool:
    """Whether ``job`` can train inside a stacked group (see the module docstring)."""
    return _job_stacks(job) and model_stacks(job.model)


def _job_stacks(job: TrainJob) -> bool:
    spec = job.spec
    return (job.penalty is None and job.loss is None and spec.optimizer == "sgd" and spec.grad_clip is None
            and job.x.shape[0] > 0)


def model_stacks(model: nn.Module) -> bool:
    """Whether ``model`` trains inside a stacked group: plain (float parameters, no hooks), no dropout, no loss of
    its own (the batched executor; the tensor engine's rows)."""
    if isinstance(model, RowModel):
        model = model.table.template
    return (not callable(getattr(model, "loss", None)) and is_plain(model)
            and not any(isinstance(m, _NO_STACK) for m in model.modules()))


class BatchedExecutor(Executor):
    """Trains pending same-architecture jobs as stacked models (see the module docstring)."""

    name = "batched"

    def __init__(self, pool: Optional[Executor] = None) -> None:
        """``pool``: where the work that is not a stacked training group runs (default: here, inline)."""
        super().__init__()
        self._inline = InlineExecutor()
        self._pool = pool
        self._pending: dict[int, TrainJob | CallJob] = {}
        self._planned: dict[int, list[int]] = {}  # a flushed training job's index -> its slice, until trained
        self._waiting: dict[int, TrainJob] = {}  # the planned slices' jobs
        self._done: dict[int, Any] = {}
        self._next = 0
        # a model's architecture facts (stacks, arch key): per table for rows of one (a plain dict: a weak
        # lookup per job cost 4% of a gossip run at N = 10,000), else per model
        self._table_facts: dict[int, tuple[ModelTable, bool, str]] = {}
        self._model_facts: weakref.WeakKeyDictionary[nn.Module, tuple[bool, str]] = weakref.WeakKeyDictionary()
        self._templates: dict[str, nn.Module] = {}  # one structure per architecture, for functional_call
        #: a module per table of rows (the table kept, so its id is not reused), for their jobs that train alone
        self._scratch: dict[int, tuple[ModelTable, nn.Module]] = {}
        self.stacked_jobs = 0  # jobs that trained inside a group of two or more (for benchmarks)

    def describe(self) -> str:
        return self.name if self._pool is None else f"{self.name} ({self._pool.describe()})"

    def share(self, shards: Sequence[Shard]) -> None:
        if self._pool is not None:
            self._pool.share(shards)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def submit(self, job: Job) -> Future[Any]:
        if stacking_of(job) is not None:
            return self._defer(cast(CallJob, job))
        if not isinstance(job, TrainJob) or not self._stacks(job):
            cheap = 0 < job.flops < INLINE_FLOPS
            return (self._inline if cheap or self._pool is None else self._pool).submit(job)
        gen = torch.Generator(device=job.generator.device)
        gen.set_state(job.generator.get_state())
        snap = object.__new__(TrainJob)  # a shallow copy (copy.copy's reduce protocol costs more than the job)
        snap.__dict__.update(job.__dict__)
        snap.generator = gen
        snap.model = job.model  # kept for its architecture; the state is snapshotted below
        if job.state is None:  # else the caller's own copy, kept unchanged (one copy, not two)
            snap.state = clone_state(live_state(job.model))  # one clone for a flat model
        return self._defer(snap)

    def _defer(self, job: TrainJob | CallJob) -> Future[Any]:
        index, self._next = self._next, self._next + 1
        self._pending[index] = job
        return Deferred(functools.partial(self.outcome, index))

    def _stacks(self, job: TrainJob) -> bool:
        """``stackable``, with the model's part cached (see ``_facts``)."""
        return self._facts(job.model)[0] and _job_stacks(job)

    def _facts(self, model: nn.Module) -> tuple[bool, str]:
        """Whether ``model``'s architecture stacks, and its key: cached per table for rows of one, else per model."""
        if isinstance(model, RowModel):
            entry = self._table_facts.get(id(model.table))
            if entry is None:
                entry = self._table_facts[id(model.table)] = (model.table, model_stacks(model), _arch_key(model))
            return entry[1], entry[2]
        facts = self._model_facts.get(model)
        if facts is None:
            facts = self._model_facts[model] = (model_stacks(model), _arch_key(model))
        return facts

    def outcome(self, index: int) -> Any:
        if index not in self._done:
            if index not in self._planned:
                self._flush()
            if index not in self._done:
                self._train(self._planned[index])
        return self._done.pop(index)

    def _flush(self) -> None:
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for i, job in self._pending.items():
            groups[self._group_key(job)].append(i)
        pending, self._pending = self._pending, {}
        calls: list[tuple[list[int], CallJob]] = []  # slices of grouped calls, one job each
        for group in groups.values():
            stacking = stacking_of(pending[group[0]])
            for members in _slices(group, MAX_GROUP if stacking is None else stacking.limit):
                if stacking is not None:
                    jobs = [cast(CallJob, pending[i]) for i in members]
                    calls.append((members, _stacked_job(jobs)))
                    self.stacked_jobs += len(jobs) if stacking.run is not None and len(jobs) > 1 else 0
                    continue
                for i in members:  # trained when one of them is awaited: a slice's outcomes at a time
                    self._planned[i] = members
                    self._waiting[i] = cast(TrainJob, pending[i])
        # the slices go out a few at a time: a slice is copied when it is sent, so sending every slice of a
        # fleet at once would hold the whole fleet's arguments twice (e.g. 10^4 RND targets, 3.4 GB)
        running: deque[tuple[list[int], Future[Any]]] = deque()
        for members, job in calls:
            running.append((members, (self._pool or self._inline).submit(job)))
            if len(running) >= IN_FLIGHT:
                done, future = running.popleft()
                self._done.update(zip(done, future.result()))
        for members, future in running:
            self._done.update(zip(members, future.result()))

    def _train(self, members: list[int]) -> None:
        """Train one planned slice (cut by ``_flush`` from what was pending then, so the same bits
        whenever it runs): outcomes wait for their awaiting only a slice at a time."""
        train = [self._waiting.pop(i) for i in members]
        for i in members:
            del self._planned[i]
        outs = [_run_alone(train[0], self._scratch)] if len(train) == 1 else _train_group(train, self._templates)
        self.stacked_jobs += len(train) if len(train) > 1 else 0
        self._done.update(zip(members, outs))

    def _group_key(self, job: TrainJob | CallJob) -> tuple[Any, ...]:
        if isinstance(job, CallJob):
            stacking = stacking_of(job)
            assert stacking is not None
            return (job.fn.__module__, job.fn.__qualname__, job.threads, stacking.key(*job.args))
        arch = self._facts(job.model)[1]
        spec = job.spec
        return (arch, tuple(job.x.shape), job.x.dtype, tuple(job.y.shape), job.y.dtype, job.threads,
                spec.epochs if job.epochs is None else job.epochs, spec.lr if job.lr is None else job.lr,
                spec.momentum if job.momentum is None else job.momentum, spec.batch_size, spec.weight_decay)


def _slices(group: list[int], limit: int) -> list[list[int]]:
    """``group`` cut into the fewest slices of at most ``limit`` (>= 4) jobs, as equal as can be: none is a
    group of one (which would take the inline path) unless the group is."""
    k = -(-len(group) // limit)
    size, extra = divmod(len(group), k)
    out, start = [], 0
    for j in range(k):
        end = start + size + (j < extra)
        out.append(group[start:end])
        start = end
    return out


def _state(job: TrainJob) -> Mapping[str, torch.Tensor]:
    assert job.state is not None  # set at submit
    return job.state


def run_stacked(fn: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
    """``fn``'s stacked form on ``calls`` (a call job's function: one slice, run here or in a worker)."""
    stacking = getattr(fn, "stacking", None)
    assert stacking is not None
    if stacking.run is None or len(calls) == 1:
        return [fn(*c) for c in calls]
    return stacking.run(calls)


def _stacked_job(jobs: list[CallJob]) -> CallJob:
    """One job for a slice of stacked calls of one function (at the jobs' thread count)."""
    first = jobs[0]
    return CallJob(first.node, run_stacked, (first.fn, [j.args for j in jobs]), threads=first.threads,
                   flops=sum(j.flops for j in jobs))


def _run_alone(job: TrainJob, scratch: dict[int, tuple[ModelTable, nn.Module]]) -> TrainOutcome:
    """A group of one: the inline path on a module loaded with the snapshot. A row model's job trains on
    its table's scratch module, made once and loaded each time (a module made per job was a sixth of the
    training of a FedAvg round at N = 10^4, whose jobs train alone), and its outcome is copied off it."""
    alone = copy.copy(job)
    if not isinstance(job.model, RowModel):
        alone.model = copy.deepcopy(job.model)
        alone.model.load_state_dict(_state(job))
        return alone.run()
    table = job.model.table
    if id(table) not in scratch:
        scratch[id(table)] = (table, job.model.materialize())
    model = scratch[id(table)][1]
    model.train(job.model.training)
    model.load_state_dict(_state(job))
    alone.model = model
    out = alone.run()
    return TrainOutcome({k: v.clone() for k, v in out.state.items()}, out.generator_state, out.result)


def _arch_key(model: nn.Module) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}:{model!r}"


def _train_group(jobs: list[TrainJob], templates: dict[str, nn.Module]) -> list[TrainOutcome]:
    """Train ``jobs`` (same architecture, data shape and settings) as one stacked model."""
    first = jobs[0]
    if torch.get_num_threads() != first.threads:
        torch.set_num_threads(first.threads)
    spec = first.spec
    epochs = spec.epochs if first.epochs is None else first.epochs
    lr = spec.lr if first.lr is None else first.lr
    momentum = spec.momentum if first.momentum is None else first.momentum
    template = templates.get(key := _arch_key(first.model))
    if template is None:  # only its structure is used by functional_call, never its own weights
        template = templates[key] = clone_module(first.model).train()
    trainable = {name for name, p in template.named_parameters() if p.requires_grad}
    names = list(_state(first))
    k, n, bs = len(jobs), int(first.x.shape[0]), spec.batch_size
    layout = _flat_layout(jobs, trainable)
    flat: Optional[torch.Tensor] = None
    if layout is not None:  # one (k, P) tensor: the optimizer step is one operation for the whole group
        flat = torch.stack([cast(FlatState, _state(j)).vector for j in jobs])
        parameters = {nm: flat[:, a:b].view(k, *s) for nm, s, a, b in
                      zip(layout.names, layout.shapes, layout.offsets, layout.offsets[1:])}
        rest: dict[str, torch.Tensor] = {}
    else:
        stacked = {name: torch.stack([_state(j)[name] for j in jobs]) for name in names}
        parameters = {name: stacked[name] for name in names if name in trainable}
        rest = {name: stacked[name] for name in names if name not in trainable}

    X = _stacked_inputs(jobs)
    Y = torch.stack([j.y for j in jobs])

    def loss_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return task_loss(functional_call(template, {**p, **b}, (x,)), y)

    batched_loss = vmap(loss_of, in_dims=(0, 0, 0, 0))
    totals, batches = stacked_sgd(lambda p, x, y: batched_loss(p, rest, x, y), parameters, X, Y,
                                  lambda _: torch.stack([batch_order(j.generator, n) for j in jobs]),
                                  epochs=epochs, batch_size=bs, lr=lr, momentum=momentum,
                                  weight_decay=spec.weight_decay, flat=flat)
    samples = n * epochs

    def state(i: int) -> Mapping[str, torch.Tensor]:
        if flat is not None and layout is not None:
            return FlatState(flat[i].clone(), layout)
        return {name: stacked[name][i].detach().clone() for name in names}

    return [TrainOutcome(state(i), j.generator.get_state(),
                         TrainResult(samples=samples, loss=float(totals[i]) / max(batches, 1)))
            for i, j in enumerate(jobs)]


def _stacked_inputs(jobs: list[TrainJob]) -> torch.Tensor | PoolRows:
    """The group's inputs ``(k, n, ...)``: where every job holds rows of one pool, those rows, so each batch is
    gathered from the pool once (the same values as gathering each job's rows and stacking them)."""
    xs = [j.x for j in jobs]
    first = xs[0]
    if isinstance(first, PoolRows) and all(isinstance(x, PoolRows) and x.pool is first.pool for x in xs):
        return PoolRows(first.pool, torch.stack([cast(PoolRows, x).rows for x in xs]))
    return torch.stack([j.inputs() for j in jobs])


def _flat_layout(jobs: list[TrainJob], trainable: set[str]) -> Optional[Layout]:
    """The layout shared by every job's flat snapshot, when every entry is a trainable parameter."""
    states = [_state(j) for j in jobs]
    first = states[0]
    if not isinstance(first, FlatState) or set(first.layout.names) != trainable:
        return None
    if all(isinstance(s, FlatState) and s.layout == first.layout for s in states):
        return first.layout
    return None
