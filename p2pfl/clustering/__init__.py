"""Clustering maths for clustered FL: RND novelty, compatibility federations, FedDRMan's CUA, scores, plots.

Pure functions (no SimPy) that the protocols compose; the RND clustered-FL
paper (Secs. III-V) is the source of every rule here but ``cua`` (compatible update
aggregation: grouping by update similarity, FedDRMan Sec. III-C1).
"""

from p2pfl.clustering.compatibility import (
    compatibility_clusters,
    compatibility_graph,
    compatible,
    label_propagation_clusters,
)
from p2pfl.clustering.cua import cua_partition, match_clusters, partition_score, update_similarity
from p2pfl.clustering.plots import novelty_heatmap
from p2pfl.clustering.rnd import (
    fit_predictor,
    make_predictor,
    make_target,
    novelties,
    novelty,
    novelty_matrix,
    novelty_row,
    rnd_flops,
    target_embedding,
    train_predictor,
)
from p2pfl.clustering.scores import (
    adjusted_rand_index,
    clustering_scores,
    labels_from_clusters,
    misclassification_rate,
)

__all__ = [
    "make_target",
    "make_predictor",
    "target_embedding",
    "fit_predictor",
    "train_predictor",
    "novelty",
    "novelties",
    "novelty_row",
    "novelty_matrix",
    "rnd_flops",
    "compatible",
    "compatibility_graph",
    "compatibility_clusters",
    "label_propagation_clusters",
    "adjusted_rand_index",
    "misclassification_rate",
    "clustering_scores",
    "labels_from_clusters",
    "novelty_heatmap",
    "update_similarity",
    "partition_score",
    "cua_partition",
    "match_clusters",
]
