"""Message sizes declared per message kind: what each protocol's messages carry, so that a program that never
builds a payload (the tensor engine) counts the bytes the event kernel measures (``p2pfl.sim.cost.message_bytes``
of the real payload; a test holds every message the kernel sends to its declared size).

A message is the 64-byte header, its model states (``state_bytes`` each: the model's tensor bytes), its RND
predictor states (``predictor_bytes`` each: ``p2pfl.clustering.rnd.predictor_state_bytes``) and its 8-byte scalars
(``p2pfl.sim.cost``). Under dynamics some carry a scalar more (``dynamic_scalars``: DSGD's live
degree); IFCA's restarts add a loss at a restart's end.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES

__all__ = ["Carries", "MESSAGES", "message_size"]


@dataclass(frozen=True)
class Carries:
    """What one kind of message holds: ``models`` model states (``per_cluster``: that many a cluster, as IFCA's K
    cluster models), ``predictors`` RND predictor states and ``scalars`` 8-byte numbers (sample counts, cluster
    ids, verdicts, labels)."""

    models: int = 0
    predictors: int = 0
    scalars: int = 0
    per_cluster: bool = False
    dynamic_scalars: int = 0  # scalars it carries more under dynamics

    def size(self, state_bytes: int, clusters: int = 1, dynamic: bool = False, predictor_bytes: int = 0) -> int:
        """Bytes on the wire for a model of ``state_bytes`` (``clusters``: K, where the models are one a cluster;
        ``dynamic``: the scenario has a ``dynamics:`` block; ``predictor_bytes``: an RND predictor's state)."""
        models = self.models * (clusters if self.per_cluster else 1)
        scalars = self.scalars + (self.dynamic_scalars if dynamic else 0)
        return HEADER_BYTES + models * state_bytes + self.predictors * predictor_bytes + scalars * SCALAR_BYTES


#: protocol -> message kind -> what it carries (the payloads ``p2pfl.protocols`` sends)
MESSAGES: dict[str, dict[str, Carries]] = {
    # push-pull gossip (Boyd et al. 2006): a model each way
    "gossip": {"gossip_push": Carries(models=1), "gossip_reply": Carries(models=1)},
    # D-PSGD (Lian et al. 2017): a model to each neighbour (under dynamics with the sender's live degree)
    "dsgd": {"dsgd_model": Carries(models=1, dynamic_scalars=1)},
    # DAC, cosine variant (Conditional paper App. K-C): a model to each candidate (the variant with a program)
    "dac": {"dac_model": Carries(models=1)},
    # FedAvg (McMahan et al. 2017, Alg. 1): the global model down, a model and its sample count up
    "fedavg": {"model": Carries(models=1), "update": Carries(models=1, scalars=1)},
    # IFCA (Ghosh et al. 2020, Alg. 2): K models down; a model, its sample count and cluster id up; the balanced
    # initializer's probe (K models) and its reply (a cluster id)
    "ifca": {"models": Carries(models=1, per_cluster=True), "update": Carries(models=1, scalars=2),
             "probe": Carries(models=1, per_cluster=True), "probe_reply": Carries(scalars=1)},
    # the federated Oracle: each device's cluster id once, then FedAvg within each cluster
    "oracle": {"join": Carries(scalars=1), "model": Carries(models=1), "update": Carries(models=1, scalars=1)},
    "local": {},
    # serverless RND (RND paper Sec. V's remark; rnd_gossip): a predictor to each device in reach, a verdict (8
    # bytes) back to each, min-label propagation over the mutually compatible links, then gossip among them
    "rnd_gossip": {"rnd_predictor": Carries(predictors=1), "rnd_verdict": Carries(scalars=1),
                   "rnd_label": Carries(scalars=1), "gossip_push": Carries(models=1),
                   "gossip_reply": Carries(models=1)},
}


def message_size(protocol: str, kind: str, state_bytes: int, clusters: int = 1, dynamic: bool = False,
                 predictor_bytes: int = 0) -> int:
    """Bytes of one ``kind`` message of ``protocol`` for a model of ``state_bytes`` (``clusters``: K;
    ``dynamic``: under a ``dynamics:`` block; ``predictor_bytes``: an RND predictor's state)."""
    return MESSAGES[protocol][kind].size(state_bytes, clusters, dynamic, predictor_bytes)
