"""Seed streams: ``child_seeds`` gives ``child_seed``'s integers for many ids at once."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfl.seeding import child_seed, child_seeds


@pytest.mark.parametrize("seed", [0, 7, 123_456_789_012_345, 2**63 - 1, 2**100 + 5])  # 1 to 4 entropy words
@pytest.mark.parametrize("purpose", ["node", "data.synthetic.samples"])
def test_child_seeds_are_child_seed(seed: int, purpose: str) -> None:
    ids = np.r_[0:200, 65_536, 2**32 - 1]
    assert child_seeds(seed, purpose, ids).tolist() == [child_seed(seed, purpose, int(i)) for i in ids]


def test_child_seeds_refuse_ids_of_two_words() -> None:
    with pytest.raises(ValueError, match="below 2\\^32"):
        child_seeds(0, "node", np.array([2**32]))
    assert child_seeds(0, "node", np.array([], dtype=np.int64)).tolist() == []
