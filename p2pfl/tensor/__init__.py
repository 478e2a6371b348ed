"""The tensor engine (``engine: tensor``): a fleet held as arrays, each round its protocol's tensor program.

``graph`` (CSR adjacency), ``data`` (stacked shards), ``train`` (rows trained a chunk at a time), ``timing``
(the link model over arrays), ``program`` (what a program is given and returns, and its interface), ``server``
(the programs through one server), ``simulation`` (the driver: which program, what the engine cannot run, the
summary). The programs themselves live beside their protocols (``p2pfl/protocols/*/<name>_tensor.py``); the
event kernel is ``p2pfl.sim``, and ``p2pfl.engines`` chooses between the two.
"""
