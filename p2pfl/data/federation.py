"""``build_federation`` (the entry point the kernel calls); ``Shard`` and ``Federation`` (defined in
``p2pfl.data.shards``) and ``Plan`` (``p2pfl.data.partitions``) are re-exported from here.

``build_federation(spec, n_devices, seed=...)`` loads the pool(s), asks the
partition kind's plan (``p2pfl.data.partitions.PLANS``) for disjoint training
indices, clusters, label maps and input transforms, draws local test sets that
follow each device's training distribution
(``p2pfl.data.splitters.local_test_partition``), and returns tensors ready to
train.  A plug-in's partition kind (``p2pfl.data.schema.PluginPartition``, e.g. robotics'
``robot_suites``) builds its own federation: ``build_federation`` hands it the spec.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from p2pfl.data.datasets import Pool
from p2pfl.data.partitions import PLANS, Plan, Transform
from p2pfl.data.schema import DataSpec, PluginPartition
from p2pfl.data.shards import Federation, PoolRows, Shard
from p2pfl.data.splitters import local_test_partition
from p2pfl.data.synthetic import build_synthetic
from p2pfl.errors import ConfigError, DataError
from p2pfl.seeding import stream

__all__ = ["Shard", "Federation", "build_federation", "Plan"]


def _check_devices(spec: DataSpec, n_devices: int) -> None:
    if not isinstance(n_devices, (int, np.integer)) or n_devices < 1:
        raise ConfigError(f"build_federation needs n_devices >= 1; got {n_devices!r}")
    k = spec.n_clusters
    if k > n_devices:
        raise ConfigError(f"data.partition defines {k} clusters but there are only {n_devices} devices; use at least {k} devices")
    size = spec.cluster_size
    if size is not None and size * k != n_devices:
        what = f"data.sparsity={spec.sparsity} (clients_per_cluster={size})" if spec.clients_per_cluster is None else f"data.clients_per_cluster={size}"
        raise ConfigError(
            f"{what} x {k} clusters (data.partition) = {size * k} devices, but the topology has {n_devices}; "
            f"make the device count {size * k} or set clients_per_cluster to n_devices / n_clusters"
        )


def build_federation(spec: DataSpec, n_devices: int, *, seed: int) -> Federation:
    """Build one shard per device as ``spec`` says; same (spec, n_devices, seed) => identical tensors.

    A plug-in's partition kind builds its own (``PluginPartition.build``); its device count is its to check.
    """
    kind = spec.partition.kind
    if isinstance(spec.partition, PluginPartition):
        fed = spec.partition.build(spec, int(n_devices), seed=seed)
        if not isinstance(fed, Federation):
            raise TypeError(f"partition kind {kind!r} built a {type(fed).__name__}, not a p2pfl.data.Federation")
        return fed
    _check_devices(spec, n_devices)
    if kind == "parameter_shift":
        return build_synthetic(spec, int(n_devices), seed=seed)
    plan = PLANS[kind](spec, int(n_devices), seed)
    return _assemble(spec, plan, seed)


def _inputs(pool: Pool, x_all: np.ndarray, idx: np.ndarray, transform: Transform | None, split: str) -> torch.Tensor:
    """Samples ``idx`` of one split as the model sees them: float32, divided by the pool's scale, transformed."""
    x = torch.from_numpy(np.ascontiguousarray(x_all[idx], dtype=np.float32))
    if pool.scale != 1.0:
        x.div_(pool.scale)
    return x if transform is None else transform(x, split)


def _shared_inputs(plan: Plan, test_index: list[np.ndarray]) -> dict[tuple[str, int, str], tuple[np.ndarray, torch.Tensor, int]]:
    """The inputs devices share: per (source, transform, split) used by two or more devices (or by any number
    with no transform), the sorted rows they draw, those rows transformed once, and where they start in their
    split's pool. A transform shared by devices acts on each sample alone (``Plan``), so a device's rows of it
    equal its own samples transformed. Each split's groups lie end to end in one pool, so a group of training
    jobs gathers its batches from one tensor (``p2pfl.executors.batched``) whatever transform each device has."""
    users = Counter(id(t) for t in plan.transforms)
    groups: dict[tuple[str, int, str], tuple[Transform | None, list[np.ndarray]]] = {}
    for i, (src, t) in enumerate(zip(plan.sources, plan.transforms)):
        if t is None or users[id(t)] > 1:
            for split, idx in (("train", plan.train_index[i]), ("test", test_index[i])):
                groups.setdefault((src, id(t), split), (t, []))[1].append(idx)
    rows = {key: np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
            for key, (_, parts) in groups.items()}
    shared = {}
    for split in ("train", "test"):
        keys = [key for key in groups if key[2] == split]
        pool: torch.Tensor | None = None
        start = 0
        for key in keys:
            src, _, _ = key
            x_all = plan.pools[src].train_x if split == "train" else plan.pools[src].test_x
            x = _inputs(plan.pools[src], x_all, rows[key], groups[key][0], split)
            if pool is None:  # filled group by group: no second copy of the split's samples at once
                pool = torch.empty((sum(len(rows[k]) for k in keys), *x.shape[1:]), dtype=x.dtype)
            pool[start : start + x.shape[0]] = x
            shared[key] = (rows[key], pool, start)
            start += int(x.shape[0])
    return shared


def _assemble(spec: DataSpec, plan: Plan, seed: int) -> Federation:
    n = len(plan.sources)
    test_index: list[np.ndarray] = [np.empty(0, np.int64)] * n
    for s_id, src in enumerate(sorted(set(plan.sources))):
        pool = plan.pools[src]
        devs = [i for i in range(n) if plan.sources[i] == src]
        parts = local_test_partition(
            [pool.train_y[plan.train_index[i]] for i in devs], pool.test_y, spec.test_fraction,
            rng=stream(seed, "data.test", s_id), size=spec.test_samples_per_client,
        )
        for i, part in zip(devs, parts):
            test_index[i] = part
    shapes = {plan.pools[s].input_shape for s in plan.sources}
    if len(shapes) != 1:
        raise DataError(f"datasets {sorted(set(plan.sources))} have different input shapes {sorted(shapes)}; pick datasets of one resolution")
    shared = _shared_inputs(plan, test_index)
    shards = []
    for i in range(n):
        pool = plan.pools[plan.sources[i]]
        tr, te = plan.train_index[i], test_index[i]
        label_map, transform = plan.label_maps[i], plan.transforms[i]
        xs: list[torch.Tensor | PoolRows] = []
        ys = []
        for x_all, y_all, idx, split in ((pool.train_x, pool.train_y, tr, "train"), (pool.test_x, pool.test_y, te, "test")):
            key = (plan.sources[i], id(transform), split)
            if key in shared:
                rows, inputs, start = shared[key]
                xs.append(PoolRows(inputs, torch.from_numpy(np.searchsorted(rows, idx) + start)))
            else:
                xs.append(_inputs(pool, x_all, idx, transform, split))
            y = y_all[idx]
            if label_map is not None:
                y = label_map[y]
            ys.append(torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)))
        shards.append(Shard(xs[0], ys[0], xs[1], ys[1], int(plan.clusters[i]), tr, te, plan.sources[i]))
    return Federation(
        dataset=spec.dataset if len(set(plan.sources)) == 1 else "+".join(dict.fromkeys(plan.sources)),
        shards=tuple(shards),
        num_classes=plan.num_classes,
        input_shape=shapes.pop(),
        true_clusters=tuple(int(c) for c in plan.clusters),
        partition=spec.partition.kind,
    )
