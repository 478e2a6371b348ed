"""Datasets (loaders) and partitions (heterogeneity generators).

The kernel calls ``build_federation(spec, n_devices, seed=...)`` and gets one
:class:`Shard` per device.  ``DATASETS`` and ``PARTITIONS`` map every YAML
name to a one-line description.
"""

from p2pfl.data.datasets import DATASETS, load_dataset
from p2pfl.data.federation import Federation, Shard, build_federation
from p2pfl.data.schema import PARTITIONS, SPARSITY, DataSpec, PartitionSpec

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
