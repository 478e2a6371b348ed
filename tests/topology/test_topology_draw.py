"""draw_topology writes a real PNG image."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import pytest

from p2pfl.topology import TopologySpec, build_topology, draw_topology

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "random_geometric", "n": 12, "radius": 0.5, "servers": [{"name": "fedavg"}]},
        {"kind": "ring", "n": 6, "servers": [{"name": "a", "attach": [0, 1]}, {"name": "b"}]},
        {"kind": "line", "n": 1},
    ],
    ids=["geometric+server", "ring+2servers", "single"],
)
def test_draw_writes_png(tmp_path: Path, fields: dict) -> None:
    topo = build_topology(TopologySpec.model_validate(fields), seed=0)
    out = draw_topology(topo, tmp_path / "figs" / "topo.png", title="test")
    assert out == tmp_path / "figs" / "topo.png"
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    image = mpimg.imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image.shape[2] in (3, 4)
    assert image[..., :3].std() > 0  # not a blank canvas
