"""``p2pfl robot demo TASK --out x.gif|x.png``: an expert rollout as an animated GIF or a PNG strip."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["expert_rollout_frames", "save_frames"]


def expert_rollout_frames(task_id: str, seed: int = 0, size: int = 128, horizon: int = 80) -> tuple[list[np.ndarray], bool]:
    """Frames (rendered at ``size`` px) of one scripted-expert episode, and whether it succeeded."""
    from p2pfl.robotics.env import Expert, RobotEnv
    from p2pfl.robotics.suites import get_task

    env = RobotEnv(get_task(task_id), image_size=size)
    obs = env.reset(seed)
    ex = Expert(env, np.random.default_rng(seed))
    frames, ok = [obs["agentview_rgb"]], False
    for _ in range(horizon):
        obs, info = env.step(ex.act())
        frames.append(obs["agentview_rgb"])
        if info.success:
            ok = True
            break
    return frames, ok


def save_frames(frames: list[np.ndarray], out: Path, title: str = "") -> None:
    """A GIF (``.gif``) or a PNG strip of up to 8 evenly spaced frames (anything else)."""
    from PIL import Image

    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".gif":
        imgs = [Image.fromarray(f) for f in frames]
        imgs[0].save(out, save_all=True, append_images=imgs[1:], duration=80, loop=0)
        return
    idx = np.linspace(0, len(frames) - 1, min(8, len(frames))).round().astype(int)
    Image.fromarray(np.concatenate([frames[i] for i in idx], axis=1)).save(out)
