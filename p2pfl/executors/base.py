"""The executor contract: jobs snapshotted at submit, outcomes applied at completion time.

The simulated duration of a job is known before it runs (FLOPs / the device's
FLOP rate), so when a device calls ``ctx.train`` at simulated time t the kernel
hands the job to the executor at once and asks for its outcome only when the
clock reaches t + duration. A job's inputs (a copy of the model, the generator's
state, its data) are taken at submit; its outputs are applied to the live model
at completion. Every executor follows that one rule, so the history is the same
whether jobs ran one by one here or overlapped on many cores.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, cast

import torch

from p2pfl.data.shards import PoolRows

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.data import Shard
    from p2pfl.executors.jobs import Job

__all__ = ["Executor", "Future", "Done", "Deferred", "Joined", "ExecutorError", "SHARD_FIELDS", "pool_shards", "SharedViews"]

T = TypeVar("T")

#: The shard tensors an executor shares with its workers once per run.
SHARD_FIELDS = ("train_x", "train_y", "test_x", "test_y")


class ExecutorError(RuntimeError):
    """A worker died or a job raised in a worker (the message carries the worker's traceback)."""


class Future(ABC, Generic[T]):
    """A submitted job's outcome; ``result()`` blocks until it is there."""

    @abstractmethod
    def result(self) -> T: ...

    def ready(self) -> bool:
        """Whether ``result()`` would return without waiting for the job (False where the executor cannot
        tell without waiting)."""
        return False


class Done(Future[T]):
    """An outcome that is already there."""

    def __init__(self, value: T) -> None:
        self.value = value

    def result(self) -> T:
        return self.value

    def ready(self) -> bool:
        return True


class Deferred(Future[T]):
    """An outcome fetched when it is first asked for (``fetch`` blocks until it is there), then kept:
    ``result()`` may be called again (the kernel shares one rollout's future among the devices it scores).
    ``ready()`` asks the executor (``ready``, when it can tell) whether the fetch would not wait."""

    _UNSET: Any = object()

    def __init__(self, fetch: Callable[[], T], ready: Optional[Callable[[], bool]] = None) -> None:
        self._fetch: Optional[Callable[[], T]] = fetch
        self._ready = ready
        self._value: Any = Deferred._UNSET

    def ready(self) -> bool:
        return self._value is not Deferred._UNSET or (self._ready is not None and self._ready())

    def result(self) -> T:
        if self._value is Deferred._UNSET:
            assert self._fetch is not None
            self._value = self._fetch()
            self._fetch = None
        return cast(T, self._value)


class Joined(Future[T]):
    """One outcome made of several jobs' outcomes: ``combine([f.result() for f in futures])``, computed once."""

    _UNSET: Any = object()

    def __init__(self, futures: Sequence[Future[Any]], combine: Callable[[list[Any]], T]) -> None:
        self._futures = list(futures)
        self._combine = combine
        self._value: Any = Joined._UNSET

    def ready(self) -> bool:
        return self._value is not Joined._UNSET or all(f.ready() for f in self._futures)

    def result(self) -> T:
        if self._value is Joined._UNSET:
            self._value = self._combine([f.result() for f in self._futures])
            self._futures = []
        return cast(T, self._value)


class Executor(ABC):
    """Runs jobs (the kernel measures the seconds spent handing them over and awaiting them)."""

    name = "executor"

    def share(self, shards: Sequence[Shard]) -> None:  # noqa: B027 - optional hook
        """Make the shards' tensors available to the workers once (inline needs nothing)."""

    @abstractmethod
    def submit(self, job: Job) -> Future[Any]:
        """Snapshot ``job`` now and start it; the future yields its outcome."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release workers (idempotent)."""

    def describe(self) -> str:
        """One line for logs: the kind and its size."""
        return self.name


def pool_shards(shards: Sequence[Shard]) -> tuple[dict[str, torch.Tensor], dict[int, str]]:
    """Lay every shard tensor end to end, one pool per field, dtype and sample shape; rebind the shards to views.

    Returns the pools ``{name: tensor}`` and the keys of the shards' new tensors
    ``{id(view): "name@start:stop"}`` (resolved by :class:`SharedViews`). The shards hold the
    same values as before, so a worker maps a few large buffers instead of four
    per device. Inputs held as rows of a pool several shards share (``p2pfl.data.PoolRows``) keep
    their rows: that pool is shared whole, once, and a job carrying the rows names it by its key.
    """
    pools: dict[str, torch.Tensor] = {}
    keys: dict[int, str] = {}
    for field in SHARD_FIELDS:
        groups: dict[tuple[torch.dtype, tuple[int, ...]], list[int]] = {}
        row_pools = 0
        for i, s in enumerate(shards):
            held = s.held(field)
            if isinstance(held, PoolRows):
                if id(held.pool) not in keys:
                    name, row_pools = f"{field}.rows.{row_pools}", row_pools + 1
                    pools[name] = held.pool
                    keys[id(held.pool)] = f"{name}@0:{held.pool.shape[0]}"
                continue
            groups.setdefault((held.dtype, tuple(held.shape[1:])), []).append(i)
        for g, (dtype_shape, members) in enumerate(groups.items()):
            parts = [getattr(shards[i], field) for i in members]
            pool = torch.cat([p.reshape(p.shape[0], *dtype_shape[1]) for p in parts]) if parts else torch.empty(0)
            name = f"{field}.{g}"
            pools[name] = pool
            offset = 0
            for i, p in zip(members, parts):
                n = p.shape[0]
                view = pool[offset : offset + n]
                shards[i].rebind(field, view)  # read-only to protocols; same values
                keys[id(view)] = f"{name}@{offset}:{offset + n}"
                offset += n
    return pools, keys


class SharedViews(dict[str, torch.Tensor]):
    """``{key: tensor}`` for a worker: ``"name@start:stop"`` resolves to a view of pool ``name`` (cached)."""

    def __init__(self, pools: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.pools = pools

    def __missing__(self, key: str) -> torch.Tensor:
        name, _, span = key.partition("@")
        start, _, stop = span.partition(":")
        view = self[key] = self.pools[name][int(start) : int(stop)]
        return view
