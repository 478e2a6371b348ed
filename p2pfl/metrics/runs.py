"""Run directories as tables: find them, read their score, and load them into pandas.

    load_runs(*dirs)           one row per run: summary scalars, cell.json fields, scenario.* and
                               timing.* columns, grouping columns
    load_curves(*dirs)         one row per run and evaluated round: path, metric, round, t, value, bytes, and
                               the traffic the run recorded by then (bytes_per_device, bytes_servers)
    load_nodes(*dirs)          one row per run and device: path, metric, node, value, bytes, compute, samples
    load_log(*dirs, name=...)  one row per run and entry of a log (logs.<name>): path, t, round, value, ...
    log_entries(*dirs, name=...)  the same entries per run directory: path -> list of records
    revision_includes(rev, commit)  whether the code a run ran (its ``git_revision``) includes a commit

Each dir is a run directory or any folder holding run directories, found at any depth by their
``summary.json`` (temporary ``.*.tmp-*`` folders are skipped). A run written by ``p2pfl sweep``
also has ``cell.json``: ``{"study", "cell", "variant", "grid": {dotted_key: value}, "seed"}``.

Runs are grouped across seeds (the ``group`` column): by (study, variant, grid, metric) when
``cell.json`` is there, else by (scenario name, protocol, dataset, metric, hash of
``scenario.yaml`` without its ``seed``), so that only seed replicates share a group.

Scores are read by ``run_score``, which also reads run directories written before summaries
were metric-aware. pandas is imported when a table is built, not with this module. The reports in
``analysis/`` read run directories only through these tables (``p2pfl.metrics.tables`` writes markdown).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from p2pfl.errors import UserError
from p2pfl.metrics.summary import LOWER_IS_BETTER, metric_label

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Score", "run_score", "time_to_fraction", "find_runs", "scenario_hash", "load_runs", "load_curves",
           "load_nodes", "load_log", "log_entries", "revision_includes", "TMP_PATTERN", "CELL_FIELDS"]

#: temporary run directories (``write_run_dir``): never read
TMP_PATTERN = ".*.tmp-*"
#: cell.json fields that become columns (``grid`` becomes one ``grid.<key>`` column per key)
CELL_FIELDS = ("study", "cell", "variant")


@dataclass(frozen=True)
class Score:
    """A run's score, whatever its metric: final mean and worst device, and the mean per evaluated round."""

    metric: str
    mean: Optional[float]
    worst: Optional[float]
    curve: list[tuple[float, float]]  # (simulated time, mean device score) per evaluated round
    rounds: tuple[Optional[int], ...] = ()  # the round of each curve point
    per_node: tuple[Optional[float], ...] = ()  # final score per device (None: not scored)

    @property
    def label(self) -> str:
        return metric_label(self.metric)

    @property
    def lower_is_better(self) -> bool:
        return self.metric in LOWER_IS_BETTER


def _is_robot(summary: dict[str, Any]) -> bool:
    part = summary.get("partition") or {}
    return part.get("partition") == "robot_suites" or part.get("dataset") == "robotics"


def run_score(summary: dict[str, Any]) -> Score:
    """The score fields of a summary (current format, or the older one that called every score accuracy)."""
    metric = summary.get("metric") or "accuracy"
    if f"{metric}_curve" in summary:  # current format: every field named by the metric
        if metric == "accuracy" and "success_curve" not in summary and _is_robot(summary):
            metric = "success"  # old robot run: rollout success rates stored as accuracy_*
            src = "accuracy"
        else:
            src = metric
        points = summary[f"{src}_curve"]
        return Score(metric, summary.get(f"{src}_mean"), summary.get(f"{src}_worst"),
                     [(p["t"], p[f"{src}_mean"]) for p in points], tuple(p.get("round") for p in points),
                     tuple(summary.get(f"{src}_per_node") or ()))
    # older format: the curve was always accuracy_curve / accuracy_mean, whatever it held
    points = summary.get("accuracy_curve") or []
    per_node = summary.get(f"{metric}_per_node") or summary.get("accuracy_per_node") or ()
    return Score(metric, summary.get(f"{metric}_mean"), summary.get(f"{metric}_worst"),
                 [(p["t"], p["accuracy_mean"]) for p in points], tuple(p.get("round") for p in points),
                 tuple(per_node))


def time_to_fraction(summary: dict[str, Any], fraction: float = 0.9) -> Optional[float]:
    """Simulated time at which the mean device score first got within ``fraction`` of its final value.

    "Within" is a ratio of the score to the final one, read in the metric's direction: for a
    higher-is-better metric (accuracy, success) the first curve point with ``score >= fraction x final``;
    for a lower-is-better one (RMSE) the first with ``final / score >= fraction``, i.e.
    ``score <= final / fraction`` (0.9: at most about 11% above the final RMSE). ``final`` is the
    summary's ``<metric>_mean``. None when the run has no curve or no final score (or, for RMSE,
    never got that close).
    """
    score = run_score(summary)
    final = score.mean
    if not score.curve or final is None:
        return None
    for t, value in score.curve:
        if score.lower_is_better:
            if value * fraction <= final:
                return t
        elif value >= fraction * final:
            return t
    return None


def find_runs(*dirs: str | Path) -> list[Path]:
    """Run directories in ``dirs`` (each a run directory or a folder of them, at any depth): in the order of
    ``dirs``, sorted within each, each run once."""
    if not dirs:
        raise UserError("no run directories given")
    found: dict[Path, Path] = {}
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            raise UserError(f"{root}: no such directory; pass a run directory written by 'p2pfl run' "
                            "or a folder of them")
        here: list[Path] = []
        for folder, subdirs, files in os.walk(root):
            if "summary.json" in files:
                here.append(Path(folder))
                subdirs[:] = []  # a run directory holds no other runs
            else:
                subdirs[:] = sorted(s for s in subdirs if not fnmatch.fnmatch(s, TMP_PATTERN))
        if not here:
            raise UserError(f"{root}: not a run directory and none below it (no summary.json); "
                            "pass a folder written by 'p2pfl run' or 'p2pfl sweep'")
        for p in sorted(here):
            found.setdefault(p.resolve(), p)
    return list(found.values())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot be read as JSON ({' '.join(str(err).splitlines())})") from None


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"{path}: cannot be read as YAML ({' '.join(str(err).splitlines())})") from None


def _hash(sc: Any) -> str:
    if isinstance(sc, dict):
        sc = {k: v for k, v in sc.items() if k != "seed"}
    text = json.dumps(sc, sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def scenario_hash(run_dir: str | Path) -> Optional[str]:
    """12 hex digits of the run's resolved scenario (``scenario.yaml``) without its ``seed``; None without the file."""
    path = Path(run_dir) / "scenario.yaml"
    return _hash(_read_yaml(path)) if path.is_file() else None


def _scalars(d: dict[str, Any], prefix: str = "", lists: bool = False) -> dict[str, Any]:
    """Scalar leaves of a nested dict, keyed by dotted path; lists left out (``lists``: kept as JSON text)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_scalars(v, f"{key}.", lists))
        elif v is None or isinstance(v, (bool, int, float, str)):
            out[key] = v
        elif lists:
            out[key] = _cell_value(v)
    return out


def _cell_value(v: Any) -> Any:
    """A grid value as a column cell: scalars as they are, lists and mappings as compact JSON text."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v, sort_keys=True)


def _run_row(path: Path) -> dict[str, Any]:
    summary = _read_json(path / "summary.json")
    if not isinstance(summary, dict):
        raise UserError(f"{path / 'summary.json'}: not a run summary (expected a JSON object)")
    cell_file = path / "cell.json"
    cell = _read_json(cell_file) if cell_file.is_file() else None
    if cell is not None and not isinstance(cell, dict):
        raise UserError(f"{cell_file}: expected a JSON object with study, cell, variant, grid, seed")
    row: dict[str, Any] = {"path": str(path)}
    row.update({k: (cell or {}).get(k) for k in CELL_FIELDS})
    grid = (cell or {}).get("grid") or {}
    row.update({f"grid.{k}": _cell_value(v) for k, v in grid.items()})
    flat = _scalars(summary)
    if "seed" not in flat and cell is not None:
        flat["seed"] = cell.get("seed")
    row.update(flat)
    has_sc = (path / "scenario.yaml").is_file()
    sc = _read_yaml(path / "scenario.yaml") if has_sc else None
    timing = _read_json(path / "timing.json") if (path / "timing.json").is_file() else None
    row.update(_scalars(sc if isinstance(sc, dict) else {}, "scenario.", lists=True))
    row.update(_scalars(timing if isinstance(timing, dict) else {}, "timing."))
    man = _read_json(path / "manifest.json") if (path / "manifest.json").is_file() else None
    row["git_revision"] = man.get("git_revision") if isinstance(man, dict) else None
    score = run_score(summary)
    dataset = (summary.get("partition") or {}).get("dataset")
    shash = _hash(sc) if has_sc else None
    row.update({"metric": score.metric, "score": score.mean, "score_worst": score.worst,
                "t90_s": time_to_fraction(summary), "scenario_hash": shash})
    if cell is not None:
        grid_text = ",".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(grid.items()))
        row["group"] = f"{cell.get('study')}/{cell.get('variant') or '-'}/{grid_text} [{score.metric}]"
    elif shash is not None:
        row["group"] = f"{summary.get('scenario')}/{summary.get('protocol')}/{dataset}/{shash} [{score.metric}]"
    else:  # nothing says which runs replicate it: a group of its own
        row["group"] = f"{path} [{score.metric}]"
    return row


def load_runs(*dirs: str | Path) -> pd.DataFrame:
    """One row per run directory in ``dirs`` (see the module docstring and docs/outputs.md, "From Python").

    Columns: ``path``; ``study``, ``cell``, ``variant`` (None without cell.json) and ``grid.<key>``
    per grid key of cell.json; every scalar field of summary.json, nested mappings flattened with
    dots (``partition.dataset``, ``partition.partition``, ``bytes_by_kind.<kind>``); list-valued
    fields (per-node values, curves, logs: ``load_nodes``, ``load_curves``, ``load_log``) are left out;
    ``scenario.<key>`` per field of the resolved scenario.yaml (``scenario.protocol.rounds``; a list as
    compact JSON text, as a grid value) and ``timing.<key>`` per field of timing.json (``timing.wall_s``),
    missing without the file; ``git_revision``, the code the run ran (manifest.json; None without it). Then
    ``metric`` (as ``run_score`` reads it), ``score`` and ``score_worst`` (the final ``<metric>_mean`` /
    ``<metric>_worst``), ``t90_s`` (``time_to_fraction``), ``scenario_hash`` and ``group`` (runs that differ only
    by seed share it).
    """
    import pandas as pd

    df = pd.DataFrame([_run_row(p) for p in find_runs(*dirs)])
    grid = sorted(c for c in df.columns if c.startswith("grid."))
    first = ["path", *CELL_FIELDS, *grid]
    last = ["score", "score_worst", "t90_s", "scenario_hash", "group"]
    return df[first + [c for c in df.columns if c not in first and c not in last] + last]


def _send_bytes(path: Path) -> Optional[tuple[list[float], list[int]]]:
    """(time, cumulative bytes) of every transmission in ``events.jsonl``, or of every round where the
    ``round`` lines carry the bytes so far (``engine: tensor``); None without the file."""
    events = path / "events.jsonl"
    if not events.is_file():
        return None
    times, cum, total = [], [], 0
    with open(events, encoding="utf-8") as fh:
        for line in fh:
            e = json.loads(line)
            if e["kind"] == "send" or (e["kind"] == "drop" and "reason" not in e):  # older logs: a drop was the send
                total += e["bytes"]
                times.append(e["t"])
                cum.append(total)
            elif e["kind"] == "round" and "bytes_total" in e:
                times.append(e["t"])
                cum.append(e["bytes_total"])
    return times, cum


#: The columns of ``load_curves``.
CURVE_COLUMNS = ["path", "metric", "round", "t", "value", "bytes", "bytes_per_device", "bytes_servers"]


def load_curves(*dirs: str | Path, over_time: bool = False) -> pd.DataFrame:
    """Long form of the score curves: one row per run and evaluated round.

    Columns ``path``, ``metric``, ``round``, ``t`` (simulated s), ``value`` (mean device score),
    ``bytes`` (bytes the fleet had sent by ``t``, from events.jsonl; missing without that file), and what
    the summary's curve point recorded of the traffic by that round (``p2pfl.metrics.summary.score_curve``,
    so archived cells have it too): ``bytes_per_device`` (the devices' mean bytes sent) and ``bytes_servers``
    (all servers' bytes sent); missing in runs written before the points carried them.
    ``over_time=True``: the summary's ``<metric>_over_time`` instead (the fleet over simulated time:
    ``p2pfl.metrics.summary.score_over_time``), round None, ``bytes`` from the point; runs written before it
    give no rows.
    """
    import pandas as pd

    if over_time:
        return _curves_over_time(*dirs)
    rows = []
    for path in find_runs(*dirs):
        summary = _read_json(path / "summary.json")
        score = run_score(summary)
        points = summary.get(f"{score.metric}_curve") or summary.get("accuracy_curve") or []  # older: accuracy_*
        sends = _send_bytes(path)
        rounds = score.rounds or (None,) * len(score.curve)
        for r, (t, v), point in zip(rounds, score.curve, points):
            b = None
            if sends is not None:
                i = bisect_right(sends[0], t)
                b = sends[1][i - 1] if i else 0
            rows.append({"path": str(path), "metric": score.metric, "round": r, "t": t, "value": v, "bytes": b,
                         **{k: point.get(k) for k in ("bytes_per_device", "bytes_servers")}})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def _curves_over_time(*dirs: str | Path) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for path in find_runs(*dirs):
        summary = _read_json(path / "summary.json")
        metric = run_score(summary).metric
        for p in summary.get(f"{metric}_over_time") or []:
            rows.append({"path": str(path), "metric": metric, "round": None, "t": p["t"], "value": p[f"{metric}_mean"],
                         "bytes": p["bytes_per_device"] * summary["n_devices"] + p["bytes_servers"],
                         "bytes_per_device": p["bytes_per_device"], "bytes_servers": p["bytes_servers"]})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def load_nodes(*dirs: str | Path) -> pd.DataFrame:
    """Long form of the per-device figures: one row per run and device.

    Columns ``path``, ``metric``, ``node``, ``value`` (final score; missing if not scored),
    ``bytes_sent``, ``bytes_received``, ``compute_flops``, ``true_cluster``, ``cluster`` (the
    index of the device's cluster in ``clusters``, for clustering protocols; else missing) and
    ``held_out`` (True for a device a pooled reference held out of training, ``held_out_per_cluster``)
    and ``samples`` (its training samples, ``partition.samples_per_device``).
    """
    import pandas as pd

    rows = []
    for path in find_runs(*dirs):
        s = _read_json(path / "summary.json")
        score = run_score(s)
        n = int(s.get("n_devices") or len(score.per_node))
        found = {int(i): c for c, members in enumerate(s.get("clusters") or []) for i in members}
        held_out = {int(i) for i in s.get("held_out") or []}
        samples = (s.get("partition") or {}).get("samples_per_device") or []

        def at(key: str, i: int, s: dict[str, Any] = s) -> Any:
            values = s.get(key) or []
            return values[i] if i < len(values) else None

        for i in range(n):
            rows.append({"path": str(path), "metric": score.metric, "node": i,
                         "value": score.per_node[i] if i < len(score.per_node) else None,
                         "bytes_sent": at("bytes_per_node", i), "bytes_received": at("bytes_received_per_node", i),
                         "compute_flops": at("compute_flops_per_node", i), "true_cluster": at("true_clusters", i),
                         "cluster": found.get(i), "held_out": i in held_out,
                         "samples": samples[i] if i < len(samples) else None})
    return pd.DataFrame(rows, columns=["path", "metric", "node", "value", "bytes_sent", "bytes_received",
                                       "compute_flops", "true_cluster", "cluster", "held_out", "samples"])


def load_log(*dirs: str | Path, name: str) -> pd.DataFrame:
    """Long form of one log the runs kept (summary.json ``logs.<name>``): one row per run and entry.

    Logs are what protocols and the kernel recorded during a run, an entry per event or round:
    ``ari`` and ``federation_labels`` (clustering), ``consensus_distance``, ``rollout_success`` (robot
    rollouts: ``suite``, ``per_task``), ``cua_groups``. Columns ``path``, ``t``, ``round``, ``value``,
    then the entries' other fields in the order first met (missing where an entry lacks one); a list
    or mapping value stays one object in its cell. A run without the log has no rows.
    """
    import pandas as pd

    rows = [{"path": str(path), **entry} for path in find_runs(*dirs)
            for entry in (_read_json(path / "summary.json").get("logs") or {}).get(name) or []]
    first = ["path", "t", "round", "value"]
    return pd.DataFrame(rows, columns=first + [k for k in dict.fromkeys(k for r in rows for k in r) if k not in first])


def log_entries(*dirs: str | Path, name: str) -> dict[str, list[dict[str, Any]]]:
    """``load_log``'s rows per run: path -> its entries in order, each a record of the table's columns (``path``
    included; a field the entry lacks is missing). A run without the log has no key."""
    return {str(path): sub.to_dict("records") for path, sub in load_log(*dirs, name=name).groupby("path", sort=False)}


def revision_includes(revision: Any, commit: str, repo: str | Path = ".") -> Optional[bool]:
    """Whether the code a run ran (its ``git_revision``) includes ``commit``, asked of git in ``repo``; None
    when git cannot tell (no revision, no git, a revision this history does not have)."""
    if not isinstance(revision, str) or not revision:
        return None
    try:
        rc = subprocess.run(["git", "merge-base", "--is-ancestor", commit, revision], cwd=repo,
                            capture_output=True).returncode
    except OSError:
        return None
    return {0: True, 1: False}.get(rc)
