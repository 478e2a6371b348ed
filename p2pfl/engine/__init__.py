"""The tensor engine (``engine: tensor``): a fleet held as arrays, rounds as tensor programs.

``graph`` (CSR adjacency), ``data`` (stacked shards), ``train`` (rows trained a chunk at a time), ``timing``
(the link model over arrays), ``rounds`` (gossip, DSGD, FedAvg, IFCA, the Oracle and Local as programs), ``simulation`` (the driver), ``select``
(which engine runs a scenario).
"""
