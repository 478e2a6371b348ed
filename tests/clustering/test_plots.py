"""The federation pictures: which labels each panel shows, and a real PNG of a moving neighbourhood."""

from __future__ import annotations

import io

import numpy as np

from p2pfl.clustering.plots import federation_frames, frame_moments

LOG = [{"t": 60.0, "round": 1, "value": [0, 0, 1, 1]}, {"t": 61.0, "round": 2, "value": [0, 0, 1, 2]},
       {"t": 62.0, "round": 3, "value": [0, 1, 1, 2]}]


def test_panels_show_the_logged_rounds_or_the_labels_in_force_at_given_moments() -> None:
    assert [(t, e["round"]) for t, e in frame_moments(LOG)] == [(60.0, 1), (61.0, 2), (62.0, 3)]
    # before the first entry: the federation each device will join; then the latest entry at or before t
    assert [(t, e["round"]) for t, e in frame_moments(LOG, at=(0.0, 61.0, 61.5, 99.0))] == [
        (0.0, 1), (61.0, 2), (61.5, 2), (99.0, 3)]


def test_federation_frames_writes_the_figure_as_a_png(tmp_path) -> None:
    pos = np.stack([np.full((4, 2), 0.1 * k, dtype=np.float32) + np.arange(4)[:, None] * 0.05 for k in range(8)])
    buf = io.BytesIO()
    np.savez_compressed(buf, t=np.arange(8) * 10.0, pos=pos)
    (tmp_path / "positions.npz").write_bytes(buf.getvalue())
    out = federation_frames(tmp_path / "positions.npz", LOG, [{"round": 3, "value": 0.5}], 0.1, tmp_path / "f.png",
                            title="test", at=(0.0, 35.0, 70.0))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    assert imread(out).shape[:2] == (504, 1440)  # 12 x 4.2 inches at 120 dpi
