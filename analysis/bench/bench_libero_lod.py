"""What simplified visual meshes (``data.partition.render_lod``) buy and cost in a real LIBERO rollout.

    python analysis/bench/bench_libero_lod.py --demos ~/.cache/p2pfl/libero/libero_object [--lods 0.00025,0.0005,0.001]

Needs the ``libero`` extra and a demo file recorded with whole meshes (``libero_demos``, no ``--lod``).
One torch thread, one process, one environment. Each row replays the first demo of the first file in
``--demos`` from its initial state with its executed actions, both cameras at 128 px (the study's layout),
once with LIBERO's meshes whole and once simplified within ``lod`` metres, twice each in the order
whole, lod, whole, lod (a reset between: robosuite's hard reset compiles the whole meshes again). Columns:
the triangles of the simplified meshes, the median milliseconds of a control step (physics and both
renders, meshes out of a camera's view culled as in rollouts) of each, whether every state of the replay is byte-identical (the physics never reads a visual
mesh), and the images' difference from the whole meshes' (mean absolute difference in 0-255 levels, and the
share of pixels where a channel differs by more than 16) for the agent view and the wrist camera.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch


def replay(env, init_state: np.ndarray, actions: np.ndarray, lod: float) -> tuple[list[float], np.ndarray, list]:
    """Seconds per control step, the states and the (agent, wrist) images of one replay."""
    from p2pfl.robotics.libero import prepare_renders

    env.env.reset()
    prepare_renders(env.env, lod)  # as rollouts render
    env.set_init_state(init_state)
    secs, states, frames = [], [], []
    for a in actions:
        t0 = time.perf_counter()
        o, _, _, _ = env.step(a)
        secs.append(time.perf_counter() - t0)
        states.append(env.env.sim.get_state().flatten())
        frames.append((o["agentview_image"], o["robot0_eye_in_hand_image"]))
    return secs, np.asarray(states), frames


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", type=Path, required=True, help="a folder of whole-mesh LIBERO-Object demo files")
    ap.add_argument("--lods", default="0.00025,0.0005,0.001", help="comma-separated errors (m)")
    ap.add_argument("--steps", type=int, default=150, help="control steps replayed (at most the demo's)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    import h5py
    import mujoco

    from p2pfl.metrics.tables import markdown_table
    from p2pfl.robotics.gl import require_gl
    from p2pfl.robotics.libero import bddl_path, libero_available, libero_benchmark
    from p2pfl.robotics.lod import simplified_meshes

    require_gl()
    reason = libero_available()
    if reason is not None:
        print(f"needs LIBERO: pip install -e '.[libero]' ({reason})", file=sys.stderr)
        return 2
    files = sorted(a.demos.expanduser().glob("*_demo.hdf5"))
    if not files:
        print(f"--demos: no *_demo.hdf5 in {a.demos}", file=sys.stderr)
        return 2
    with h5py.File(files[0], "r") as f:
        if float(f["data"].attrs.get("render_lod", 0.0)) != 0.0:
            print(f"--demos: {files[0].name} was recorded with simplified meshes; give whole-mesh demos", file=sys.stderr)
            return 2
        init_state = np.asarray(f["data/demo_0"].attrs["init_state"])
        actions = np.asarray(f["data/demo_0/actions"])[: a.steps]
    from libero.libero.envs import OffScreenRenderEnv

    bench = libero_benchmark("libero_object")
    task = files[0].name.removesuffix("_demo.hdf5")
    i = [t.name for t in bench.tasks].index(task)
    env = OffScreenRenderEnv(bddl_file_name=bddl_path(bench.get_task(i)), camera_heights=128, camera_widths=128,
                             camera_names=["agentview", "robot0_eye_in_hand"])
    rows = []
    try:
        env.reset()
        model = env.env.sim.model._model
        whole = sum(int(model.mesh_facenum[m]) for m in simplified_meshes(mujoco, model, env.env.camera_names))
        for lod in [float(x) for x in a.lods.split(",")]:
            runs: dict[str, list[float]] = {"whole": [], "lod": []}
            out = {}
            for name in ("whole", "lod", "whole", "lod"):
                secs, states, frames = replay(env, init_state, actions, lod if name == "lod" else 0.0)
                runs[name] += secs
                out[name] = (states, frames)
                if name == "lod":
                    tris = sum(int(env.env.sim.model._model.mesh_facenum[m])
                               for m in simplified_meshes(mujoco, env.env.sim.model._model, env.env.camera_names))
            ms_whole, ms_lod = 1e3 * statistics.median(runs["whole"]), 1e3 * statistics.median(runs["lod"])
            same = bool(np.array_equal(out["whole"][0], out["lod"][0]))
            diffs = []
            for cam in (0, 1):
                d = [np.abs(w[cam].astype(np.int16) - s[cam].astype(np.int16))
                     for w, s in zip(out["whole"][1], out["lod"][1])]
                diffs.append((np.mean([x.mean() for x in d]), 100 * np.mean([(x.max(axis=2) > 16).mean() for x in d])))
            rows.append((f"{1e3 * lod:g} mm", f"{whole:,} -> {tris:,}", f"{ms_whole:.1f} -> {ms_lod:.1f} "
                         f"({ms_whole / ms_lod:.2f}x)", "yes" if same else "NO",
                         f"{diffs[0][0]:.2f} / {diffs[1][0]:.2f}", f"{diffs[0][1]:.2f} / {diffs[1][1]:.2f}"))
    finally:
        env.close()
    print(f"LIBERO libero_object/{task}, demo_0, {len(actions)} steps, both cameras at 128 px; torch "
          f"{torch.__version__}, 1 thread\n")
    print("\n".join(markdown_table(rows, ["render_lod", "triangles (simplifiable meshes)", "ms a step, whole -> lod",
                                          "states identical", "mean |diff| agent / wrist", "% pixels > 16 agent / wrist"],
                                   align="lrrcrr")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
