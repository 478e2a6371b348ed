"""Smoke test of the LIBERO path, for a user with LIBERO installed and its datasets downloaded.

    python -m p2pfl.robotics.libero_smoke --demos ~/LIBERO/libero/datasets/libero_object --suite libero_object

Loads two demo files through p2pfl's LIBERO-layout loader, trains the policy a few steps, and runs
one closed-loop rollout of one task through LIBERO's benchmark API.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", required=True, help="folder with LIBERO *_demo.hdf5 files")
    ap.add_argument("--suite", default="libero_object")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    import torch

    from p2pfl.learning.train import TrainingSpec, train_local
    from p2pfl.robotics.demos import read_demo_file
    from p2pfl.robotics.libero import libero_available, libero_env_factory
    from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy, pack_samples, resize_frames
    from p2pfl.robotics.rollout import rollout_tasks

    files = sorted(Path(a.demos).expanduser().glob("*_demo.hdf5"))[:2]
    if not files:
        print(f"no *_demo.hdf5 in {a.demos}", file=sys.stderr)
        return 2
    xs, ys = [], []
    lay: ObsLayout | None = None
    for f in files:
        df = read_demo_file(f, max_demos=2)
        d0 = df.demos[0]
        lay = ObsLayout(joint=d0.joint_states.shape[1], gripper=d0.gripper_states.shape[1], action=d0.actions.shape[1])
        for d in df.demos:
            xs.append(torch.from_numpy(pack_samples(lay, resize_frames(d.agentview_rgb, lay.image), d.joint_states, d.gripper_states, df.instruction)))
            ys.append(torch.from_numpy(d.actions))
        print(f"{f.name}: {len(df.demos)} demos, '{df.instruction}', actions {d0.actions.shape}")
    if lay is None:  # files is not empty, so the loop set it
        return 2
    model = ResNetTPolicy(lay)
    res = train_local(model, torch.cat(xs), torch.cat(ys), TrainingSpec(epochs=1, batch_size=32, lr=1e-4, optimizer="adamw"),
                      generator=torch.Generator().manual_seed(0))
    print(f"trained one epoch: loss {res.loss:.3f}")
    reason = libero_available()
    if reason is not None:
        print(f"libero not importable ({reason}); skipping the rollout")
        return 1
    tid = f"{a.suite}/{files[0].stem.removesuffix('_demo')}"
    instruction = read_demo_file(files[0], max_demos=1).instruction
    out = rollout_tasks(model, lay, [tid], episodes=1, horizon=a.steps,
                        make_env=libero_env_factory(lay.image, {tid: instruction}))
    print(f"rollout {tid}: success {out.success:.2f} in {out.steps} steps (an untrained policy is expected to fail)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
