"""A user dataset living outside the p2pfl package, named in YAML as ``example_data:iris``."""

from __future__ import annotations

import numpy as np

from p2pfl.data.datasets import Pool


def iris(root: str | None) -> Pool:
    """scikit-learn's iris (150 flowers, 4 measurements, 3 species); every 5th flower is the test pool.

    ``root`` is the scenario's ``data.root`` (unused: the data ship with scikit-learn).
    """
    from sklearn.datasets import load_iris

    d = load_iris()
    x = d.data.astype(np.float32)
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # standardized measurements, fed as they are (scale 1)
    y = d.target.astype(np.int64)
    test = np.arange(len(y)) % 5 == 4
    return Pool("iris", x[~test], y[~test], x[test], y[test], num_classes=3, scale=1.0)
