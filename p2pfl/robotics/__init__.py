"""Robot manipulation for FedDRMan (Pal et al., 2026): MuJoCo task suites, scripted experts,
LIBERO-layout demonstrations, a language-conditioned GMM policy, closed-loop rollouts and the
robot federation (devices' demo shards, rollouts as evaluation).

FedDRMan's maths are generic FL maths and live elsewhere: compatible update aggregation in
``p2pfl.clustering.cua``, spectral rebalancing in ``p2pfl.learning.spectral``, subspace/action
distillation in ``p2pfl.learning.distill``; the ``robot_suites`` YAML partition in
``p2pfl.data.schema``.

Importing this package imports neither mujoco nor triton: ``p2pfl.robotics.gl`` chooses the GL
backend (``MUJOCO_GL=osmesa`` unless set), checks it, loads triton first (an OSMesa context
followed by triton's native library segfaults) and imports mujoco when rendering is first needed.
"""

from __future__ import annotations

__all__: list[str] = []
