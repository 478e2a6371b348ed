"""The round maths both engines call: the event kernel's protocols (``p2pfl.protocols``) and their tensor programs
(``p2pfl/protocols/*/<name>_tensor.py``) run one algorithm two ways, and what a round computes is written here once.

``mixing`` (Metropolis-Hastings weights from degrees), ``consensus`` (the fleet's consensus distance),
``clusters`` (cluster choice by argmin, clusters from an assignment), ``messages`` (message sizes declared per
message kind), ``dac`` (DAC cosine's round over the fleet's rows: cosines over CSR pairs, top-k, uniform averaging
in bounded memory), ``churn`` (the kernel's churn draws replayed as online masks and states at arrival times).
Below this floor, so that both reach them: transfer time is ``p2pfl.sim.cost.tx_time_s``; a device's batch orders
``p2pfl.learning.batches``; the float64 weighted sum of every average ``p2pfl.learning.aggregate.add_weighted_``;
the synthetic data ``p2pfl.data.synthetic.synthetic_fleet``; the random geometric graph and its connectivity
retries ``p2pfl.topology.geometric.random_geometric_pairs``.
"""
