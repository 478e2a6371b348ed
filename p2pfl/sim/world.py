"""The world a simulation runs in: every device's data.

:func:`build_any_federation` is the kernel's one call for it. Every partition kind goes through
``p2pfl.data.build_federation``, which hands a plug-in's kind (``p2pfl.data.schema.PluginPartition``,
e.g. robotics' ``robot_suites``) to the plug-in's own builder: nothing here knows a domain.
"""

from __future__ import annotations

from p2pfl.data import Federation, build_federation
from p2pfl.data.schema import DataSpec

__all__ = ["build_any_federation"]


def build_any_federation(spec: DataSpec, n_devices: int, seed: int) -> Federation:
    """One shard per device (``p2pfl.data.build_federation``; ``seed`` by position or keyword)."""
    return build_federation(spec, n_devices, seed=seed)
