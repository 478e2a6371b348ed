"""The world a simulation runs in: every device's data, whatever the partition kind.

``p2pfl.data`` builds the image/vector federations and knows nothing of robots;
``p2pfl.robotics.federation`` builds the robot one. :func:`build_any_federation` picks
between them on ``spec.partition.kind``, so a caller (the kernel, analysis scripts) needs
one entry point.
"""

from __future__ import annotations

from p2pfl.data import Federation, build_federation
from p2pfl.data.schema import ROBOT_PARTITION_KIND, DataSpec

__all__ = ["build_any_federation"]


def build_any_federation(spec: DataSpec, n_devices: int, seed: int) -> Federation:
    """One shard per device: ``robot_suites`` -> ``p2pfl.robotics.federation.build_robot_federation``
    (imported only then: MuJoCo rendering is checked there), else ``p2pfl.data.build_federation``.

    ``seed`` may be passed by position or keyword (``build_any_federation(spec, n, seed=s)``, the
    call ``build_federation`` takes).
    """
    if spec.partition.kind == ROBOT_PARTITION_KIND:
        from p2pfl.robotics.federation import build_robot_federation

        return build_robot_federation(spec, int(n_devices), seed=seed)
    return build_federation(spec, n_devices, seed=seed)
