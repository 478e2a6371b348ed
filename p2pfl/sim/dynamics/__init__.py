"""Dynamics on the virtual clock: churn, link failures, partitions, mobility and stragglers.

``schema`` (the YAML block), ``fleet`` (the live state the network and contexts read),
``schedule`` (the SimPy processes that change it), ``mobility`` (positions over time),
``traces`` (CSV files), ``draws`` (random periods and subsets).
"""

from p2pfl.sim.dynamics.fleet import Fleet
from p2pfl.sim.dynamics.schema import DynamicsSpec

__all__ = ["DynamicsSpec", "Fleet"]
