"""p2pfl: a discrete-event simulator for decentralized federated learning.

>>> import p2pfl
>>> result = p2pfl.run("scenarios/quickstart.yaml", seed=1)   # doctest: +SKIP
>>> result.accuracy_mean, result.bytes_total                   # doctest: +SKIP
"""

__version__ = "0.1.0"

__all__ = ["run", "RunResult", "__version__"]


def __getattr__(name: str):
    if name in ("run", "RunResult"):
        from p2pfl import api

        return getattr(api, name)
    raise AttributeError(name)
