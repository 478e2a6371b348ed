"""Studies: a base scenario swept over variants, a grid and seeds; every cell an ordinary run directory.

    spec.py         the study file: validated, expanded into cells (ids, edits, scenarios)
    runner.py       ``sweep``: the cells not yet complete, in worker processes; resumable
    ray_runner.py   the same cells as Ray tasks (``--jobs ray``)
    resume.py       the folder a sweep writes into: its lock, its complete cells, what a stopped sweep left
    archive.py      complete cells without their event streams, small enough to commit
    verify.py       ``p2pfl archive verify``: a seeded sample of archived cells re-run and compared; provenance
    times.py        how long cells take (per variant), the time left, a sweep's --budget
    display.py      progress, time left, the closing line and the dry run's listing
    result.py       ``SweepResult`` and ``SweepInterrupted``

>>> from p2pfl.study import load_study, sweep
>>> study = load_study("scenarios/studies/tour.yaml")         # doctest: +SKIP
>>> result = sweep(study, jobs=2)                              # doctest: +SKIP
"""

from p2pfl.study.display import describe
from p2pfl.study.result import SweepInterrupted, SweepResult
from p2pfl.study.runner import sweep
from p2pfl.study.spec import Cell, Study, load_study, load_study_dict

__all__ = ["sweep", "describe", "SweepResult", "SweepInterrupted", "load_study", "load_study_dict", "Study", "Cell"]
