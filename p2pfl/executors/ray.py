"""The Ray executor: each job is a Ray task, the shards sit once in Ray's object store.

``share`` lays the shards end to end (:func:`~p2pfl.executors.base.pool_shards`)
and puts each pool in the object store once, as a numpy array, so tasks on a
node map it without a copy. A job is packed at submit (its model's flat state,
the generator's state, keys for its data) and sent as one task that asks for
``threads`` CPUs; the task unpacks it against the pools, runs it with the job's
own thread count and returns its packed outcome, which is unpacked when the
kernel awaits it. Results are byte-identical to ``inline``, as with ``process``.

``address`` None starts a local Ray with this process's cores (and stops it at
``close``); ``'auto'`` or ``'ray://host:10001'`` joins a running cluster, where
every node must have ``p2pfl`` (and this run's plugins) installed in the same
versions as here: tasks import it by name, nothing is shipped.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from p2pfl.errors import ConfigError
from p2pfl.executors.base import SHARD_FIELDS, Deferred, Executor, ExecutorError, Future, SharedViews, pool_shards
from p2pfl.executors.jobs import Job, run_job
from p2pfl.executors.spec import available_cores
from p2pfl.executors.wire import Packed, pack, unpack

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data import Shard

__all__ = ["RayExecutor"]


def _run_packed(packed: Packed, names: Sequence[str], *pools: np.ndarray) -> Packed:
    """The Ray task: the pools arrive resolved (read-only, zero-copy); training never writes data."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        shared = SharedViews({n: torch.from_numpy(a) for n, a in zip(names, pools)})
    return pack(run_job(unpack(packed, shared)))


class RayExecutor(Executor):
    """One Ray task per job, ``threads`` CPUs each; ``workers`` caps the tasks in flight (None: Ray decides);
    ``cores``: the CPUs of a local Ray (None: every core this process may use)."""

    name = "ray"

    def __init__(self, address: Optional[str], *, workers: Optional[int], threads: int,
                 cores: Optional[int] = None) -> None:
        super().__init__()
        try:
            import ray
        except ImportError:
            raise ConfigError("field 'executor': kind 'ray' needs Ray; pip install 'p2pfl-sim[ray]'") from None
        self._ray = ray
        self.address, self.workers, self.threads = address, workers, threads
        self._started = not ray.is_initialized()
        if self._started:
            local: dict[str, Any] = {"num_cpus": available_cores() if cores is None else cores,
                                     "include_dashboard": False} if address is None else {}
            ray.init(address=address, log_to_driver=True, configure_logging=False, **local)
        self._task = ray.remote(_run_packed).options(num_cpus=threads)
        self._names: list[str] = []
        self._pools: list[Any] = []  # ObjectRefs, one per pool
        self._keys: dict[int, str] = {}
        self._keep: list[torch.Tensor] = []  # the shards' views: their ids are the keys
        self._in_flight: collections.deque[Any] = collections.deque()
        self._closed = False

    def describe(self) -> str:
        where = self.address or "local"
        return f"ray ({where}, {self.workers or 'any'} tasks in flight, {self.threads} CPU each)"

    def share(self, shards: Sequence[Shard]) -> None:
        pools, keys = pool_shards(shards)
        for name, t in pools.items():
            self._names.append(name)
            self._pools.append(self._ray.put(t.numpy()))
        self._keys.update(keys)
        self._keep.extend(s.held(f) for s in shards for f in SHARD_FIELDS)

    def submit(self, job: Job) -> Future[Any]:
        if self.workers is not None:
            while len(self._in_flight) >= self.workers:
                self._ray.wait([self._in_flight.popleft()])
        ref = self._task.remote(pack(job, self._keys), self._names, *self._pools)
        if self.workers is not None:
            self._in_flight.append(ref)
        return Deferred(functools.partial(self.await_ref, ref))

    def await_ref(self, ref: Any) -> Any:
        """Block until the task ``ref`` is done; its outcome (or ``ExecutorError`` with the task's traceback)."""
        try:
            return unpack(self._ray.get(ref))
        except self._ray.exceptions.RayTaskError as err:
            raise ExecutorError(f"a job failed in a Ray task:\n{err}") from None
        except self._ray.exceptions.RayError as err:
            raise ExecutorError(f"a Ray task was lost ({type(err).__name__}: {err}); "
                                "rerun with fewer workers or executor: inline") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pools.clear()
        self._in_flight.clear()
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
