"""Client-conditional FL maths (Conditional-PCA paper, Sec. III): PCA statistics and the conditioned model.

Pure functions and modules, no SimPy: ``p2pfl.protocols.server.conditional``
composes them.
"""

from p2pfl.conditioning.encoder import SmallResNetEncoder, embed, load_encoder, save_encoder, train_encoder
from p2pfl.conditioning.model import ConditionedModel, conditioned_model
from p2pfl.conditioning.statistics import (
    feature_matrix,
    log_normalize,
    pca_flops,
    pca_statistics,
    population_moments,
    zscore_normalize,
)

__all__ = [
    "feature_matrix",
    "pca_statistics",
    "pca_flops",
    "population_moments",
    "zscore_normalize",
    "log_normalize",
    "ConditionedModel",
    "conditioned_model",
    "SmallResNetEncoder",
    "train_encoder",
    "save_encoder",
    "load_encoder",
    "embed",
]
