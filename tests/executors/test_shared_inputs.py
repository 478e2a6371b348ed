"""Inputs held as rows of a shared pool reach workers as the pool's key plus the rows, never as copies."""

from __future__ import annotations

import torch

from p2pfl.data import DataSpec, build_federation
from p2pfl.data.shards import PoolRows
from p2pfl.executors.base import SharedViews, pool_shards
from p2pfl.executors.jobs import TrainJob
from p2pfl.executors.wire import pack, unpack
from p2pfl.learning.train import TrainingSpec


def _federation():
    spec = DataSpec(partition={"kind": "rotation", "angles": [0, 90]}, samples_per_client=60, overlap=True)
    return build_federation(spec, 16, seed=0)


def test_pool_shards_shares_each_pool_of_rows_once_and_keeps_the_rows():
    fed = _federation()
    before = [s.held("train_x") for s in fed.shards]
    pools, keys = pool_shards(fed.shards)
    row_pools = {id(h.pool): h.pool for h in before}
    assert len(row_pools) == 1  # both clusters' rotations, end to end in one pool a split
    assert sorted(n for n in pools if ".rows." in n) == ["test_x.rows.0", "train_x.rows.0"]
    for h in row_pools.values():
        name, _, span = keys[id(h)].partition("@")
        assert pools[name] is h and span == f"0:{h.shape[0]}"
    assert all(s.held("train_x") is h for s, h in zip(fed.shards, before))  # not laid out as copies
    assert all(isinstance(s.held("train_y"), torch.Tensor) and id(s.held("train_y")) in keys for s in fed.shards)


def test_a_job_on_shared_rows_travels_as_the_key_and_trains_on_the_same_inputs():
    fed = _federation()
    pools, keys = pool_shards(fed.shards)
    shard = fed.shards[3]
    rows = shard.held("train_x")
    assert isinstance(rows, PoolRows)
    job = TrainJob(3, torch.nn.Linear(64, 10), rows, shard.train_y, TrainingSpec(), torch.Generator())
    data, buffer = pack(job, keys)
    assert len(buffer) < rows.pool.numel() * rows.pool.element_size() // 10  # the pool stays behind
    back = unpack((data, buffer), SharedViews(pools))
    assert torch.equal(back.inputs(), shard.train_x) and torch.equal(back.y, shard.train_y)
