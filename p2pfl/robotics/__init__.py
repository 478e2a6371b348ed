"""Robot manipulation for FedDRMan (Pal et al., 2026): MuJoCo task suites, scripted experts,
LIBERO-layout demonstrations, a language-conditioned GMM policy, closed-loop rollouts, and the
pure maths of FedDRMan (subspace/action distillation, compatible update aggregation, spectral
rebalancing). MuJoCo is imported lazily, so the maths and the policy work without it.
"""

from __future__ import annotations

import os

# Headless rendering: OSMesa works everywhere (CPU); set MUJOCO_GL=egl yourself on a GPU machine.
os.environ.setdefault("MUJOCO_GL", "osmesa")
if os.environ["MUJOCO_GL"] == "osmesa":
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

__all__: list[str] = []
