"""The process executor: long-lived worker processes, shards in shared memory, jobs overlapped.

Jobs go to the worker with the least modelled work outstanding; each worker runs
its jobs in order and sends back the outcome (a model's flat state, the
generator's state, the loss). The kernel asks for an outcome at the job's
completion time, so all jobs submitted before then run meanwhile on other
cores. Results are byte-identical to ``inline``: a job carries its own
intra-op thread count (the scenario's), and torch gives the same bits in any
process at the same count.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing as mp
import os
import queue
import signal
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from p2pfl.executors.base import SHARD_FIELDS, Deferred, Executor, ExecutorError, Future, SharedViews, pool_shards
from p2pfl.executors.jobs import Job, run_job
from p2pfl.executors.wire import Packed, pack, unpack

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data import Shard

__all__ = ["ProcessExecutor"]

_POLL_S = 1.0


class ProcessExecutor(Executor):
    """``workers`` slots, each running one job at a time with the job's thread count: worker processes,
    and with ``parent_share`` this process as one of the slots."""

    name = "process"

    def __init__(self, workers: int, *, start: str = "spawn", parent_share: bool = False) -> None:
        """``start="fork"`` shares the parent's pages (torch, the shards) copy-on-write, so a worker costs
        little memory and starts at once; it is safe only for single-threaded jobs that do not render
        (a forked child hangs in its first multi-threaded torch op once the parent has used OpenMP, and
        in OSMesa once the parent has rendered). ``"spawn"`` starts fresh interpreters, safe for all.

        ``parent_share=True`` makes this process one of the ``workers`` slots (``workers - 1``
        processes are started): its jobs are packed at submit like the others and run when the kernel
        next waits for an outcome, so the simulating process, otherwise idle while the workers train,
        trains too, and one training workspace less is held in memory."""
        super().__init__()
        if start not in ("spawn", "fork"):
            raise ValueError(f"start must be 'spawn' or 'fork', not {start!r}")
        self.start_method = start
        self.workers = workers
        self.parent_share = parent_share
        self._first = 1 if parent_share else 0  # slot 0 is this process when it takes a share
        ctx: Any = mp.get_context(start)
        self._results: Any = ctx.Queue()
        self._inboxes: list[Any] = [ctx.Queue() for _ in range(self._first, workers)]
        with _without_main(), _frozen_gc(start == "fork"):
            self._procs = [ctx.Process(target=_worker_main, args=(inbox, self._results, os.getpid(), w),
                                       name=f"p2pfl-worker-{w}", daemon=True)
                           for w, inbox in enumerate(self._inboxes, start=self._first)]
            for p in self._procs:
                p.start()
        self._shared: dict[int, str] = {}
        self._views = SharedViews({})
        self._keep: list[torch.Tensor] = []
        self._load = [0.0] * workers
        self._where: dict[int, tuple[int, float]] = {}
        self._done: dict[int, tuple[bool, Any]] = {}
        self._local: dict[int, Packed] = {}  # this process's share, in submission order
        self._next = 0
        self._closed = False

    def describe(self) -> str:
        if self.parent_share:
            return f"process ({self.workers} workers: this process and {len(self._procs)} more)"
        return f"process ({self.workers} workers)"

    def share(self, shards: Sequence[Shard]) -> None:
        pools, keys = pool_shards(shards)
        for t in pools.values():
            t.share_memory_()
        self._shared.clear()  # a new run: the workers drop the previous run's pools
        self._keep = list(pools.values())
        self._keep.extend(s.held(f) for s in shards for f in SHARD_FIELDS)
        self._shared.update(keys)
        self._views = SharedViews(pools)
        for inbox in self._inboxes:
            inbox.put(("pools", pools))

    def submit(self, job: Job) -> Future[Any]:
        if job.threads != 1 and self.start_method == "fork":
            raise ExecutorError(f"a job with threads: {job.threads} was sent to forked workers, which run "
                                "single-threaded jobs only; use ProcessExecutor(workers) (spawned workers)")
        self._drain()
        job_id, self._next = self._next, self._next + 1
        cost = job.flops or 1.0
        w = min(range(self.workers), key=lambda i: (self._load[i], i))
        self._load[w] += cost
        self._where[job_id] = (w, cost)
        if w < self._first:
            self._local[job_id] = pack(job, self._shared)  # the inputs as they are now
        else:
            self._inboxes[w - self._first].put(("job", job_id, pack(job, self._shared)))
        return Deferred(functools.partial(self.await_job, job_id), ready=functools.partial(self._is_back, job_id))

    def _is_back(self, job_id: int) -> bool:
        """Whether ``job_id``'s outcome is here (a worker's sent back, or this process's share run)."""
        self._drain()
        return job_id in self._done

    def await_job(self, job_id: int) -> Any:
        """Block until ``job_id`` is back; its outcome (or the worker's error). Meanwhile this process
        runs its own share of the jobs, oldest first."""
        while job_id not in self._done:
            self._drain()
            if job_id in self._done:
                break
            if self._local:
                self._run_local(next(iter(self._local)))
                continue
            try:
                self._receive(self._results.get(timeout=_POLL_S))
            except queue.Empty:
                dead = [p.name for p in self._procs if not p.is_alive()]
                if dead:
                    raise ExecutorError(f"worker process {', '.join(dead)} died (out of memory?); "
                                        "rerun with fewer workers or executor: inline") from None
        ok, payload = self._done.pop(job_id)
        if not ok:
            raise ExecutorError(f"a job failed in a worker process:\n{payload}")
        return payload.outcome if isinstance(payload, _Ran) else unpack(payload)

    def _run_local(self, job_id: int) -> None:
        """Run one job of this process's share (an error propagates with its own traceback)."""
        packed = self._local.pop(job_id)
        w, cost = self._where.pop(job_id)
        self._load[w] -= cost
        self._done[job_id] = (True, _Ran(run_job(unpack(packed, self._views))))

    def _receive(self, item: tuple[int, bool, Any]) -> None:
        job_id, ok, payload = item
        w, cost = self._where.pop(job_id)
        self._load[w] -= cost
        self._done[job_id] = (ok, payload)

    def _drain(self) -> None:
        while True:
            try:
                self._receive(self._results.get_nowait())
            except queue.Empty:
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for inbox in self._inboxes:
            with contextlib.suppress(Exception):
                inbox.put(None)
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for q in (*self._inboxes, self._results):
            q.cancel_join_thread()
            q.close()


class _Ran:
    """The outcome of a job this process ran itself (nothing to unpack)."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """Start workers without re-running the user's ``__main__`` (a script that runs a scenario at
    top level would run it again in every worker). Jobs only reference importable modules."""
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in ("__file__", "__spec__")
                             if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


@contextlib.contextmanager
def _frozen_gc(on: bool) -> Iterator[None]:
    """Fork with every existing object in the collector's permanent generation: a forked child's
    collections then never write to the parent's objects, whose pages stay shared."""
    if not on:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def _worker_main(inbox: Any, results: Any, parent: int, index: int) -> None:
    """A worker: map the shared pools, then run jobs in order until told to stop or the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    torch.set_num_threads(1)
    shared = SharedViews({})
    while True:
        try:
            msg = inbox.get(timeout=_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if msg is None:
            return
        if msg[0] == "pools":
            shared = SharedViews(msg[1])
            continue
        _, job_id, packed = msg
        try:
            out: tuple[bool, Packed | str] = (True, pack(run_job(unpack(packed, shared))))
        except BaseException:  # the parent reports it with this traceback
            out = (False, f"(worker {index})\n{traceback.format_exc()}")
        results.put((job_id, *out))
