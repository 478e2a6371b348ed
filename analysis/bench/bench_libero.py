"""What a real LIBERO rollout costs here: seconds per control step, and memory over 20 episodes.

    python analysis/bench/bench_libero.py [--suite libero_object] [--episodes 20] [--steps 10]

Needs the ``libero`` extra (``pip install -e '.[libero]'``). One torch thread, one process.
Prints one table: building an env, resetting it (the first reset; then the next ones with LIBERO's hard
reset beside the adapter's, which keeps the scene compiled: the same bytes, tested), one control step (25
physics steps and one 128 px agent-view render; with the wrist camera too, two renders; the policy's forward
timed apart; each with the meshes out of a camera's view culled, as rollouts render, beside robosuite's
render of all), and the
process's resident memory after each of ``--episodes`` short episodes in one reused environment (the
adapter's way), beside the old way (a new environment per episode, never closed) for 3 episodes. The last
line gives the control step as FLOPs at this core's measured rate for the policy's forward: the figures the
cost model charges for a LIBERO step (``p2pfl.robotics.federation.LIBERO_STEP_FLOPS``,
``LIBERO_WRIST_STEP_FLOPS``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import numpy as np
import torch

from p2pfl.metrics.measured import rss_bytes


def median_step_s(env, rng: np.random.Generator, n: int = 100) -> float:
    """Median seconds of ``n`` control steps with small random actions."""
    steps = []
    for _ in range(n):
        act = rng.uniform(-0.2, 0.2, 7)
        t0 = time.perf_counter()
        env.step(act)
        steps.append(time.perf_counter() - t0)
    return statistics.median(steps)


def median_reset_s(env, n: int) -> float:
    """Median seconds of resets to episodes 1..``n`` (each with its 5 settling steps)."""
    times = []
    for ep in range(1, n + 1):
        t0 = time.perf_counter()
        env.reset(ep)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="libero_object")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10, help="control steps per episode")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from p2pfl.metrics.tables import markdown_table
    from p2pfl.robotics.gl import require_gl
    from p2pfl.robotics.libero import LiberoEnv, libero_available, libero_task_names
    from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy
    from p2pfl.sim.cost import forward_flops_per_sample

    require_gl()  # the rendering backend (OSMesa by default), as rollouts set it
    reason = libero_available()
    if reason is not None:
        print(f"needs LIBERO: pip install -e '.[libero]' ({reason})", file=sys.stderr)
        return 2
    task = libero_task_names(a.suite)[0]
    lay = ObsLayout(joint=7, gripper=2, action=7)
    policy = ResNetTPolicy(lay).eval()
    rows: list[tuple[str, str]] = []
    base = rss_bytes() / 2**20
    t0 = time.perf_counter()
    env = LiberoEnv(a.suite, task, lay.image, "bench")
    rows.append(("build one env (s)", f"{time.perf_counter() - t0:.2f}"))
    t0 = time.perf_counter()
    env.reset(0)
    rows.append(("first reset, incl. 5 settling steps (s)", f"{time.perf_counter() - t0:.2f}"))
    resets = {}
    for hard in (True, False):  # LIBERO's hard reset (a new scene and render context) beside the adapter's
        e = LiberoEnv(a.suite, task, lay.image, "bench", wrist=True)
        e.env.env.hard_reset = hard
        e.reset(0)
        resets[hard] = median_reset_s(e, 5)
        e.close()
    rows.append(("next resets, both cameras: LIBERO's hard reset / the scene kept (s, median of 5)",
                 f"{resets[True]:.2f} / {resets[False]:.2f} ({resets[True] / resets[False]:.1f}x)"))
    steps = {}
    for wrist in (False, True):  # culling off (robosuite's render) beside on, fresh envs, the same actions
        for cull in (False, True):
            e = LiberoEnv(a.suite, task, lay.image, "bench", wrist=wrist, cull=cull)
            e.reset(0)
            steps[wrist, cull] = median_step_s(e, np.random.default_rng(1))
            e.close()
    for wrist in (False, True):
        cams = "agent view and wrist" if wrist else "agent view"
        off, on = steps[wrist, False], steps[wrist, True]
        rows.append((f"control step, {cams}: all meshes drawn / out-of-view meshes culled (ms)",
                     f"{1e3 * off:.1f} / {1e3 * on:.1f} ({off / on:.2f}x)"))
    step_s, wrist_s = steps[False, True], steps[True, True]
    x = torch.rand(1, lay.width)
    x[:, -lay.tokens:] = 0
    with torch.no_grad():
        for _ in range(5):
            policy(x)
        t0 = time.perf_counter()
        for _ in range(50):
            policy(x)
    fwd_s = (time.perf_counter() - t0) / 50
    flops = forward_flops_per_sample(policy, (lay.width,))
    rate = flops / fwd_s
    rows.append(("policy forward, batch 1 (ms)", f"{1e3 * fwd_s:.2f}"))
    rows.append(("policy forward FLOPs / measured FLOP/s of this core", f"{flops:,} / {rate / 1e9:.2f} G"))
    mem = []
    for ep in range(a.episodes):
        env.reset(ep)
        for _ in range(a.steps):
            env.step(np.zeros(7))
        gc.collect()
        mem.append(rss_bytes() / 2**20)
    env.close()
    rows.append((f"RSS after episodes 1, 10, {a.episodes} of one reused env (MiB)",
                 f"{mem[0]:.0f}, {mem[min(9, len(mem) - 1)]:.0f}, {mem[-1]:.0f} (before the env: {base:.0f})"))
    old = []
    kept = []
    for ep in range(3):  # the old adapter: a new env per episode, never closed
        e = LiberoEnv(a.suite, task, lay.image, "bench")
        e.reset(ep)
        for _ in range(a.steps):
            e.step(np.zeros(7))
        kept.append(e)
        old.append(rss_bytes() / 2**20)
    rows.append(("RSS after episodes 1, 2, 3 with a new env each, not closed (MiB)",
                 ", ".join(f"{m:.0f}" for m in old)))
    print(f"LIBERO {a.suite}/{task}; torch {torch.__version__}, 1 thread\n")
    print("\n".join(markdown_table(rows, ["measure", "value"], align="lr")))
    print(f"\nLIBERO_STEP_FLOPS = control step x this core's rate = {step_s * rate:,.0f}")
    print(f"LIBERO_WRIST_STEP_FLOPS = control step with the wrist camera x this core's rate = {wrist_s * rate:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
