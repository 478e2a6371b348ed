"""Datasets (loaders), partition kinds (heterogeneity generators) and federations.

``datasets`` loads pools; ``schema`` is the YAML ``data:`` section (every
built-in partition kind's fields, and ``PluginPartition``, the base of a
plug-in's kind); ``partitions`` holds one plan per partition kind (``PLANS``);
``splitters`` the index arithmetic the plans use; ``shards`` defines
:class:`Shard` and :class:`Federation`, which ``federation`` builds
(``build_federation``; a plug-in's kind builds its own); ``evaluation`` says
how a federation scores a model (a test set, or a job of its own).  The build
path imports one way, federation -> partitions / synthetic -> shards, with no
circle. Datasets, partition kinds and models of plug-ins (robotics is one) are
named in ``p2pfl.plugins``; ``p2pfl.data`` imports none of them.

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
