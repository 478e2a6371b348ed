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


def _load_triton_first() -> None:
    """Load triton's native library now, before any OSMesa GL context exists.

    torch imports triton lazily (first optimizer step, torch._dynamo); loading its native
    library after MuJoCo has created an OSMesa context segfaults the process (seen with
    torch 2.14.1, mujoco 3.17 and Mesa 22.3). Importing it first avoids that.
    """
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        import triton.runtime.autotuner  # noqa: F401


_load_triton_first()

__all__: list[str] = []
