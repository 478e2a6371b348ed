"""Robot manipulation for FedDRMan (Pal et al., 2026): MuJoCo task suites, scripted experts,
LIBERO-layout demonstrations, a language-conditioned GMM policy, closed-loop rollouts and the
robot federation (devices' demo shards, rollouts as evaluation).

A plug-in domain: ``p2pfl.plugins.BUILTIN`` registers its dataset (``robotics``), partition kind
(``robot_suites``, both in ``p2pfl.robotics.schema``) and model (``robot_policy``,
``p2pfl.robotics.policy.robot_policy``) as a distribution's entry points would, and its federation
scores devices by rollouts (``RobotFederation.evaluation``); the kernel, the data schema and the
model zoo know nothing of robots.

FedDRMan's maths are generic FL maths and live elsewhere: compatible update aggregation in
``p2pfl.clustering.cua``, spectral rebalancing in ``p2pfl.learning.spectral``, subspace/action
distillation in ``p2pfl.learning.distill``.

Importing this package imports neither mujoco nor triton: ``p2pfl.robotics.gl`` chooses the GL
backend (``MUJOCO_GL=osmesa`` unless set), checks it, loads triton first (an OSMesa context
followed by triton's native library segfaults) and imports mujoco when rendering is first needed.
"""

from __future__ import annotations

__all__: list[str] = []
