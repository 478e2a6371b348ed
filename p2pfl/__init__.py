"""p2pfl: a discrete-event simulator for decentralized federated learning.

>>> import p2pfl
>>> result = p2pfl.run("scenarios/quickstart.yaml", seed=1)   # doctest: +SKIP
>>> result.accuracy_mean, result.bytes_total                   # doctest: +SKIP
>>> study = p2pfl.sweep("scenarios/studies/tour.yaml", jobs=2)  # doctest: +SKIP
>>> p2pfl.load_runs("runs/").groupby("group")["score"].mean()  # doctest: +SKIP
"""

from p2pfl.version import __version__

__all__ = ["run", "RunResult", "sweep", "SweepResult", "load_runs", "load_curves", "load_nodes", "__version__"]


def __getattr__(name: str):
    if name in ("run", "RunResult"):
        from p2pfl import api

        return getattr(api, name)
    if name in ("sweep", "SweepResult"):  # studies: p2pfl.study
        from p2pfl import study

        return getattr(study, name)
    if name in ("load_runs", "load_curves", "load_nodes"):  # pandas tables of run directories
        from p2pfl.metrics import runs

        return getattr(runs, name)
    raise AttributeError(name)
