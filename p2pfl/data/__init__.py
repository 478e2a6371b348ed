"""Datasets (loaders), partition kinds (heterogeneity generators) and federations.

``datasets`` loads pools; ``schema`` is the YAML ``data:`` section (every
partition kind's fields, the robot one included); ``partitions`` holds one plan
per partition kind (``PLANS``); ``splitters`` the index arithmetic the plans
use; ``shards`` defines :class:`Shard` and :class:`Federation`, which
``federation`` builds (``build_federation``).  The build path imports one
way, federation -> partitions / synthetic -> shards, with no circle.
``p2pfl.data`` imports nothing from ``p2pfl.robotics``: the robot federation
is built by ``p2pfl.robotics.federation`` (dispatch: ``p2pfl.sim.world``).

The kernel calls ``build_federation(spec, n_devices, seed=...)`` and gets one
:class:`Shard` per device.  ``DATASETS`` and ``PARTITIONS`` map every YAML
name to a one-line description.
"""

from p2pfl.data.datasets import DATASETS, load_dataset
from p2pfl.data.federation import build_federation
from p2pfl.data.schema import PARTITIONS, SPARSITY, DataSpec, PartitionSpec
from p2pfl.data.shards import Federation, Shard

__all__ = [
    "DataSpec",
    "PartitionSpec",
    "Shard",
    "Federation",
    "build_federation",
    "load_dataset",
    "DATASETS",
    "PARTITIONS",
    "SPARSITY",
]
