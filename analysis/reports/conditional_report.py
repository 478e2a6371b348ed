"""The Conditional-PCA paper's tables from study runs: means, 95% intervals over seeds, paper beside.

    python analysis/reports/conditional_report.py analysis/cells/conditional [--md analysis/results/conditional.md]

Reads the run directories written by the studies in ``scenarios/studies/conditional/`` (each swept with
``p2pfl sweep STUDY --jobs 2 --out runs/conditional/<file name> --archive analysis/cells/conditional/<file name>``;
a run's study is ``cond_<file name>``, found in any folder given: the archive, or the runs) and writes the report:
a claims table on top (claim, paper figure, ours with a 95% t-interval over seeds, verdict), then
one table per experiment (mean +- half-width of the interval, the paper's number in brackets where
the paper has a like-for-like row), the SGD steps per model, the memorization check, and one PNG
per experiment. Nothing here runs a simulation except the statistics-structure table, which reads
the dataset (it is about the data, not a protocol). Studies not swept yet are listed with their command.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from p2pfl.data.schema import SPARSITY
from p2pfl.metrics.claims import (
    LIKE_FOR_LIKE,
    NO_PAPER,
    NOT_RUN,
    ClaimRow,
    Declared,
    at_least,
    below,
    cannot_test,
    claims_table,
    combine,
    differs,
    fmt_ci,
    fmt_diff,
    holds_if,
    paired,
    per_part,
)
from p2pfl.metrics.report import bands
from p2pfl.metrics.runs import load_nodes, load_runs
from p2pfl.metrics.tables import markdown_table, report_main
from p2pfl.study.verify import provenance_lines

STUDY_DIR = "scenarios/studies/conditional"

#: rows of every table: federated methods, then the pooled references (kind, variant)
FEDERATED = ["Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle-fed", "Cond", "Cond-log", "Cond-none",
             "Cond-gossip"]
POOLED = ["Oracle", "Cond-pooled", "Cond-pooled-log", "Cond-pooled-none", "Centralized"]
#: our row -> the paper's row it reproduces like for like (the paper's Oracle and Conditional are pooled)
PAPER_ROW = {"Local": "Local", "FedAvg": "FedAvg", "Gossip": "Gossip", "Ditto": "Ditto", "IFCA": "IFCA",
             "DAC": "DAC", "Oracle": "Oracle", "Cond-pooled": "Cond"}
#: The paper's numbers (Fashion-MNIST columns), one list per table in the order of its columns: e1 Table X
#: (K = 2, 3, 5, 10), e1s XI, e2as XIV, e3a XVI, e3bs XVIII (rich ... super sparse: ``SPARSITY``'s five levels),
#: e2b XV (C1 ... C4), e3b XVII (K = 2 ... 5); mcdc Tables VI/VII (linear RMSE 3 and 8 clusters, logistic accuracy
#: 3 and 8; Global = FedAvg, Cluster = Oracle, Client = Local, MLP = Cond). Its Oracle and Conditional are pooled
#: training (Sec. III-C, App. B-A).
PAPER = {
    "e1": {"Local": [.908, .920, .945, 1.00], "FedAvg": [.902, .886, .745, .412], "Gossip": [.895, .899, .825, .560],
           "Ditto": [.910, .915, .933, .999], "IFCA": [.922, .932, .945, 1.00], "DAC": [.922, .931, .950, 1.00],
           "Oracle": [.937, .945, .962, 1.00], "Cond": [.936, .942, .964, 1.00]},
    "e1s": {"Local": [.909, .893, .866, .839, .798], "FedAvg": [.902, .884, .837, .784, .718],
            "Gossip": [.895, .855, .752, .633, .083], "Ditto": [.910, .891, .851, .786, .743],
            "IFCA": [.925, .906, .872, .824, .771], "DAC": [.924, .902, .866, .811, .753],
            "Oracle": [.938, .938, .935, .936, .936], "Cond": [.936, .935, .935, .933, .935]},
    "e2as": {"Local": [.995, .994, .992, .990, .989], "FedAvg": [.992, .988, .986, .985, .984],
             "Gossip": [.989, .988, .987, .600, .600], "Ditto": [.995, .993, .991, .990, .988],
             "IFCA": [.992, .989, .986, .986, .984], "DAC": [.997, .994, .992, .991, .990],
             "Oracle": [.998, .998, .998, .998, .998], "Cond": [.998, .998, .998, .998, .998]},
    "e2b": {"Local": [.877, .860, .852, .851], "FedAvg": [.876, .836, .789, .821], "Gossip": [.859, .810, .718, .773],
            "Ditto": [.880, .846, .823, .837], "IFCA": [.880, .872, .860, .855], "DAC": [.893, .871, .868, .863],
            "Oracle": [.912, .903, .900, .899], "Cond": [.913, .898, .895, .903]},
    "e3a": {"Local": [.930, .919, .901, .880, .854], "FedAvg": [.671, .661, .639, .628, .636],
            "Gossip": [.774, .746, .535, .500, .500], "Ditto": [.928, .918, .868, .815, .697],
            "IFCA": [.943, .934, .905, .876, .798], "DAC": [.941, .931, .902, .869, .816],
            "Oracle": [.950, .949, .949, .950, .948], "Cond": [.950, .951, .947, .943, .940]},
    "e3b": {"Local": [.877, .863, .854, .845], "FedAvg": [.454, .330, .278, .257], "Gossip": [.619, .677, .477, .484],
            "Ditto": [.877, .854, .833, .815], "IFCA": [.892, .593, .659, .705], "DAC": [.891, .878, .866, .856],
            "Oracle": [.914, .904, .899, .894], "Cond": [.916, .914, .911, .910]},
    "e3bs": {"Local": [.878, .854, .814, .768, .715], "FedAvg": [.456, .440, .419, .388, .367],
             "Gossip": [.621, .584, .493, .100, .100], "Ditto": [.877, .848, .781, .737, .663],
             "IFCA": [.892, .873, .816, .774, .721], "DAC": [.889, .865, .805, .756, .702],
             "Oracle": [.913, .915, .913, .914, .914], "Cond": [.918, .919, .914, .909, .901]},
    "mcdc": {"FedAvg": [14.901, 17.655, .700, .621], "Oracle": [.100, .100, .997, .997],
             "Local": [.106, .107, .944, .943], "Cond": [.134, .162, .985, .966]},
}


@dataclass(frozen=True)
class Experiment:
    key: str  # also the PAPER key
    title: str
    files: tuple[str, ...]  # study files (their runs are under runs/conditional/<file stem>/)
    columns: tuple[str, ...]  # the paper's columns, in its order (a column the runs lack is left out)
    label: Callable[[Any], str]  # a run (a load_runs row) -> its column
    paper_rows: dict[str, str] = field(default_factory=lambda: dict(PAPER_ROW))
    metric: str = "accuracy (local test sets)"
    note: str = ""  # what the reader must know to compare with the paper


SPARSE_NOTE = ("The paper's data design (App. B): the 60,000 training images split between the clusters, rich 6,000 "
               "a client (5 clients a cluster) and super sparse 300 (100 a cluster); the three levels between are "
               "not run here (the claims compare the ends). At super sparse a federated client takes 5 local SGD "
               "steps a round (batch 64), a pooled model many more (the steps table below): pooled and federated "
               "rows are not comparable.")


#: How our experiments differ from the paper's, for the claims table. Declared before the results are read, each
#: qualifies every outcome of its rows alike (issue 69).
BUDGET_DIFFERS = "an MLP on 6,000 training samples here, the paper's cnn28 on the whole training set"
#: Sparsity sweeps with the MLP: the paper's data design on a smaller model (SPARSE_NOTE).
SPARSE_DIFFERS = ("an MLP (128 hidden units) here, the paper's cnn28; the data design is the paper's (300 to 6,000 "
                  "samples a client)")
#: Sparsity sweeps with the paper's cnn28: its federated baselines run 20 rounds of one local epoch; DAC over its 4
#: graph neighbours (the paper says '20 epochs' and does not say how its federated methods split them into rounds)
FED_CNN28_DIFFERS = ("20 rounds of one local epoch for each federated method (the paper: 20 epochs, their split into "
                     "rounds not stated); DAC over its 4 graph neighbours")
MCDC_DIFFERS = ("the workshop conditioned on the first PCA eigenvector (here eigenvalues), had 100 clients per cluster "
                "(here 10) and a far weaker global model (RMSE 14.9 and 17.7; here the same MLP without s)")
#: Every claims row's comparability, by key: declared here, at import, before any result is read.
DECLARED = Declared({
    "budget": differs(BUDGET_DIFFERS),
    "sparse_mlp": differs(SPARSE_DIFFERS),
    "sparse_cnn28": LIKE_FOR_LIKE,
    "fed_mlp": differs(SPARSE_DIFFERS),
    "fed_cnn28": differs(FED_CNN28_DIFFERS),
    "mcdc": differs(MCDC_DIFFERS),
    "statistics": LIKE_FOR_LIKE,  # the paper's statistics on the paper's data (raw Fashion-MNIST pixels, l = 32)
    "ours": NO_PAPER,
    "untested": NO_PAPER,
})
#: the sparsity sweeps per model: (experiment key suffix, model label, comparability of the pooled and federated rows)
SPARSITY_MODELS = (("_cnn28", "cnn28", "sparse_cnn28", "fed_cnn28"), ("", "MLP", "sparse_mlp", "fed_mlp"))
ROTATIONS = {"[0, 180]": "C1", "[0, 120, 240]": "C2", "[0, 90, 180, 270]": "C3", "[0, 10, 180, 350]": "C4"}


def _k(row: Any) -> str:
    return f"K={int(row['grid.data.partition.n_clusters'])}"


def _sparsity(row: Any) -> str:
    return str(row["grid.data.sparsity"])


def _rotation(row: Any) -> str:
    return ROTATIONS[str(json.loads(row["grid.data.partition.angles"]))]


def _mcdc(row: Any) -> str:
    task = "linreg RMSE" if row["grid.data.dataset"] == "synthetic_linear" else "logreg acc"
    return f"{task} K={int(row['grid.data.partition.n_clusters'])}"


EXPERIMENTS = [
    Experiment("e1", "E1 label shift, K sweep, 6000 training samples in all (paper Table X, FMNIST)",
               ("e1_k", "e1_k_ifca"), ("K=2", "K=3", "K=5", "K=10"), _k),
    Experiment("e1s", "E1 label shift, sparsity sweep, K = 2, the paper's data design (paper Table XI, FMNIST)",
               ("e1_sparsity",), tuple(SPARSITY), _sparsity, note=SPARSE_NOTE),
    Experiment("e2as", "E2a covariate shift (subclasses), sparsity sweep, K = 2, the paper's data design (paper "
               "Table XIV, FMNIST)", ("e2a_sparsity",), tuple(SPARSITY), _sparsity, note=SPARSE_NOTE),
    Experiment("e2b", "E2b rotation, one cluster per angle, 6000 training samples in all (paper Table XV, FMNIST)",
               ("e2b", "e2b_ifca"), ("C1", "C2", "C3", "C4"), _rotation),
    Experiment("e3a", "E3a semantic concept shift, sparsity sweep, K = 2, the paper's data design (paper Table "
               "XVI, FMNIST)", ("e3a_sparsity",), tuple(SPARSITY), _sparsity, note=SPARSE_NOTE),
    Experiment("e3b", "E3b label permutation, K sweep, 6000 training samples in all (paper Table XVII, FMNIST)",
               ("e3b_k", "e3b_k_ifca"), ("K=2", "K=3", "K=4", "K=5"), _k),
    Experiment("e3bs", "E3b label permutation, sparsity sweep, K = 2, the paper's data design (paper Table XVIII, "
               "FMNIST)", ("e3b_sparsity",), tuple(SPARSITY), _sparsity, note=SPARSE_NOTE),
    *(Experiment(f"{key}_cnn28", f"{title}, the paper's cnn28", (f"{stem}_cnn28",), tuple(SPARSITY), _sparsity,
                 note=SPARSE_NOTE)
      for key, stem, title in (("e1s", "e1_sparsity", "E1 label shift, sparsity sweep (paper Table XI, FMNIST)"),
                               ("e2as", "e2a_sparsity", "E2a covariate shift, sparsity sweep (paper Table XIV, FMNIST)"),
                               ("e3a", "e3a_sparsity", "E3a semantic concept shift, sparsity sweep (paper Table XVI, "
                                "FMNIST)"),
                               ("e3bs", "e3b_sparsity", "E3b label permutation, sparsity sweep (paper Table XVIII, "
                                "FMNIST)"))),
    Experiment("mcdc", "MCDC synthetic tasks, 3 and 8 clusters of 10 clients (paper Tables VI/VII: Global = "
               "Centralized, Cluster = Oracle, Client = Local, MLP = Cond-pooled)", ("mcdc",),
               ("linreg RMSE K=3", "linreg RMSE K=8", "logreg acc K=3", "logreg acc K=8"), _mcdc,
               {"Centralized": "FedAvg", "Oracle": "Oracle", "Local": "Local", "Cond-pooled": "Cond"},
               "RMSE (lower is better) or accuracy",
               "Our Global (Centralized) is the same MLP as the conditioned one, without s, trained on the pooled data; "
               "the MCDC paper's global model is far worse (RMSE 14.9 and 17.7, accuracy .700 and .621), which "
               "suggests a linear model there, so the gap the statistics can close is much smaller here and the "
               "'gap closed' claim is measured against a stronger global model. On 10 features the 32 statistics "
               "inputs more than triple the MLP's first layer (Cond's bytes beside FedAvg's), unlike the <1% of the "
               "image models. Runs without a score diverged (the summary's diverged_nodes): gossip at lr 0.01 on "
               "the unnormalized regression targets."),
]
EXPERIMENT = {e.key: e for e in EXPERIMENTS}
PAPER.update({f"{k}_cnn28": PAPER[k] for k in ("e1s", "e2as", "e3a", "e3bs")})


# ------------------------------------------------------------------------------------------ data
def load(dirs: list[Path]) -> tuple[Any, Any]:
    """One row per run of an experiment (load_runs, with its experiment key, column label and training samples
    per device), and the memorization check's table (``load_memo``; None when that study has no runs)."""
    runs, nodes = load_runs(*dirs), load_nodes(*dirs)
    exp_of = {f"cond_{stem}": exp for exp in EXPERIMENTS for stem in exp.files}
    found = runs[runs["study"].isin(exp_of)].copy()
    if found.empty:
        raise SystemExit(f"{' '.join(map(str, dirs))}: no study runs found; sweep the studies in {STUDY_DIR} first")
    found["exp"] = [exp_of[s].key for s in found["study"]]
    found["col"] = [exp_of[r["study"]].label(r) for _, r in found.iterrows()]
    found["samples"] = found["path"].map(nodes.groupby("path", sort=False)["samples"].apply(list))
    memo = runs[runs["study"] == "cond_memorization"]
    return found, (load_memo(memo, nodes) if len(memo) else None)


def cell_runs(runs: Any, exp: str, variant: str, col: str) -> Any:
    """The runs (one per seed) of one table cell."""
    return runs[(runs["exp"] == exp) & (runs["variant"] == variant) & (runs["col"] == col)]


def scores(runs: Any, exp: str, variant: str, col: str) -> dict[int, float]:
    """Final score per seed of one cell."""
    sub = cell_runs(runs, exp, variant, col)
    return {int(s): float(v) for s, v in zip(sub["seed"], sub["score"]) if v is not None and not math.isnan(v)}


def ordered_cols(runs: Any, exp: str) -> list[str]:
    """The experiment's columns that have runs: the paper's in its order, then any other the runs have."""
    have = list(dict.fromkeys(runs.loc[runs["exp"] == exp, "col"]))
    paper = EXPERIMENT[exp].columns
    return [c for c in paper if c in have] + [c for c in have if c not in paper]


# ------------------------------------------------------------------------------------------ claims
def claims(runs: Any, memo: Any, structure: Any = None) -> list[str]:
    """The claims table: what the paper claims (or what ours adds), the paper's figure, ours, the verdict as computed
    and the comparability declared in ``DECLARED``. ``structure``: ``statistics_structure``'s ARIs per configuration (None: not run)."""
    def change(exp: str, variant: str, a: str, b: str) -> list[float]:  # per seed, column a minus column b
        return paired(scores(runs, exp, variant, a), scores(runs, exp, variant, b))

    def per_col(exp: str, a: str, b: str, margin: float) -> tuple[str, str]:  # 'a >= b - margin' in every column
        return per_part({c: paired(scores(runs, exp, a, c), scores(runs, exp, b, c)) for c in ordered_cols(runs, exp)},
                        lambda d: at_least(d, margin))

    rows: list[ClaimRow] = []
    row = DECLARED.row
    ours, v = per_col("e1", "Cond-pooled", "Oracle", 0.01)
    rows.append(row("budget", "E1: pooled Conditional matches the pooled Oracle at every K (within 1 point; pooled vs "
                    "pooled)", "Table X: Cond - Oracle -0.1, -0.3, +0.2, 0.0", ours, v))
    ours, v = per_col("e1", "Cond", "Oracle-fed", 0.01)
    rows.append(row("ours", "E1: federated Conditional matches the federated Oracle at every K (within 1 point)",
                    "not in the paper (its Conditional is pooled only; Sec. VI)", ours, v))
    fed2, fed10 = scores(runs, "e1", "FedAvg", "K=2"), scores(runs, "e1", "FedAvg", "K=10")
    d = paired(fed10, fed2)
    rows.append(row("budget", "E1: FedAvg collapses as K grows (K=10 below K=2)", "Table X: .902 -> .412 (-49.0)",
                    f"{fmt_ci(list(fed2.values()))} -> {fmt_ci(list(fed10.values()))} ({fmt_diff(d)})", below(d)))
    for suffix, model, pooled_key, fed_key in SPARSITY_MODELS:
        for exp, name, table in (("e1s", "E1", "XI"), ("e2as", "E2a", "XIV"), ("e3a", "E3a", "XVI"),
                                 ("e3bs", "E3b", "XVIII")):
            for variant in ("Cond-pooled", "Oracle", "Cond"):
                d = change(exp + suffix, variant, "super_sparse", "rich")
                ref = PAPER[exp].get(PAPER_ROW.get(variant, ""))
                claim = f"{name} sparsity, {model}: {variant} stays flat from rich to super sparse (within 2 points)"
                rows.append(row(pooled_key, claim, f"Table {table}: {ref[0]:.3f} -> {ref[-1]:.3f}", fmt_diff(d),
                                at_least(d, 0.02)) if ref else
                            row("ours", claim, "not in the paper (federated)", fmt_diff(d), at_least(d, 0.02)))
        for variant in ("Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC"):
            d = change("e1s" + suffix, variant, "super_sparse", "rich")
            p = PAPER["e1s"][variant]
            rows.append(row(fed_key, f"E1 sparsity, {model}: {variant} degrades from rich to super sparse",
                            f"Table XI: {p[0]:.3f} -> {p[-1]:.3f} ({100 * (p[-1] - p[0]):+.1f})", fmt_diff(d),
                            below(d)))
    ours, v = per_col("e3b", "Cond-pooled", "Oracle", 0.0)
    rows.append(row("budget", "E3b: pooled Conditional exceeds (or equals) the pooled Oracle at every K",
                    "Table XVII: +0.2, +1.0, +1.2, +1.6", ours, v))
    d = change("e3b", "FedAvg", "K=5", "K=2")
    rows.append(row("budget", "E3b: FedAvg collapses as K grows (K=5 below K=2)", "Table XVII: .454 -> .257 (-19.7)",
                    fmt_diff(d), below(d)))
    for exp, name in (("e1", "E1"), ("e2b", "E2b"), ("e3b", "E3b")):
        ours, v = per_col(exp, "Cond-pooled", "Cond-pooled-none", 0.0)
        rows.append(row("ours", f"{name}: the statistics add accuracy to pooled training (Cond-pooled minus the same "
                        "model, data and steps with s = 0; scored on the clients it trained on)",
                        "implied (Sec. V); not measured", ours, v))
    ours, v = per_col("e2b", "Cond-pooled", "Oracle", 0.01)
    rows.append(row("budget", "E2b: pooled Conditional matches the pooled Oracle on every rotation configuration "
                    "(within 1 point)", "Table XV: +0.1, -0.5, -0.5, +0.4", ours, v))
    rows += statistics_claims(structure)
    rows += mcdc_claims(runs)
    if memo is not None:
        rows += memo_claims(memo)
    rows += [
        row("untested", "E4a: Conditional matches Oracle on cross-dataset domain shift (MNIST clients beside "
            "Fashion-MNIST clients)", "Table XIX: .955 vs .957 (rich) ... .959 vs .959 (very sparse)", "—",
            cannot_test("no real MNIST on this machine (no Debian package ships it; its IDX loader is tested on format "
                        "fixtures, and cross_dataset's offline stand-in, scikit-learn digits upsampled to 28x28, is "
                        "not MNIST)")),
        row("untested", "E4b: Conditional beats Oracle on combined heterogeneity", "Table III (CIFAR-10): +1.5 ... +2.9",
            "—", cannot_test("no real CIFAR-10 on this machine; CIFAR is tested on format fixtures")),
        row("untested", "MNIST, CIFAR-10 and CIFAR-100 columns of every table", "Tables X-XVII", "—",
            cannot_test("only Fashion-MNIST is installed as real data")),
    ]
    return claims_table(rows, "ours (95% interval over seeds)")


#: the statistics claims' reading, declared before the runs: the z-scored statistics separate the true clusters when
#: k-means on them reaches ARI >= 0.5 in every configuration and seed of the claim
STRUCTURE_ARI = 0.5


def statistics_claims(aris: Any) -> list[ClaimRow]:
    """Sec. III-A's claim that the eigenvalues distinguish clients of every shift kind, read where the shift is a
    permutation of Z's columns (E3b: one-hot columns; E2b: a 180-degree rotation permutes the pixels), from
    ``statistics_structure``'s ARIs (None: not run)."""
    rows = []
    for configs, claim, paper in (
            (("E3b K=2", "E3b K=5"), "Sec. III-A: the PCA eigenvalues of [X, onehot(y)] distinguish clients "
             "with different label-to-feature mappings (E3b concept shift)", "Sec. III-A; Table XVII (Cond >= Oracle)"),
            (("E2b C1 [0, 180]",), "E2b: the PCA eigenvalue statistics capture rotation characteristics (a "
             "180-degree rotation)", "App. E2b key findings; Table XV")):
        if aris is None:
            rows.append(DECLARED.row("statistics", claim, paper, "—", NOT_RUN))
            continue
        found = {c: aris[c] for c in configs}
        ours = "; ".join(f"{c}: ARI {fmt_ci(a, 1.0, 2)}" for c, a in found.items()) + " (k-means on the z-scored statistics)"
        rows.append(DECLARED.row("statistics", claim, paper, ours,
                                 holds_if(all(min(a) >= STRUCTURE_ARI for a in found.values()))))
    return rows


def mcdc_claims(runs: Any) -> list[ClaimRow]:
    """MCDC (Tables VI/VII): conditioning closes the gap between the global and the cluster models."""
    parts, verdicts = [], []
    g_p, o_p, m_p = (PAPER["mcdc"][k] for k in ("FedAvg", "Oracle", "Cond"))  # Global, Cluster, MLP
    paper = [100 * (g - m) / (g - o) for g, o, m in zip(g_p, o_p, m_p)]
    for c in ordered_cols(runs, "mcdc"):
        g, o, m = (scores(runs, "mcdc", v, c) for v in ("Centralized", "Oracle", "Cond-pooled"))
        closed = [(g[s] - m[s]) / (g[s] - o[s]) for s in sorted(set(g) & set(o) & set(m)) if g[s] != o[s]]
        parts.append(f"{c}: {fmt_ci(closed, 100, 1)}%")
        verdicts.append(at_least([x - 0.9 for x in closed], 0.0))
    rows = [DECLARED.row("mcdc", "MCDC: the conditioned MLP closes at least 90% of the gap between the global and the "
                         "cluster models (pooled: Centralized, Cond-pooled, Oracle)",
                         "Tables VI/VII: " + ", ".join(f"{v:.1f}%" for v in paper), "; ".join(parts),
                         combine(verdicts))]
    parts, verdicts = [], []
    for task, sign in (("linreg RMSE", 1.0), ("logreg acc", -1.0)):
        change = paired(scores(runs, "mcdc", "Centralized", f"{task} K=8"),
                        scores(runs, "mcdc", "Centralized", f"{task} K=3"))  # K=8 minus K=3, in the metric's units
        parts.append(f"{task}: {fmt_diff(change) if sign < 0 else fmt_diff(change, 1.0, 3)}")
        verdicts.append(below([-sign * x for x in change]))  # < 0 when the global model is worse with 8 clusters
    rows.append(DECLARED.row("mcdc", "MCDC: the global model gets worse with 8 clusters than with 3",
                             "Tables VI/VII: RMSE 14.90 -> 17.66, accuracy .700 -> .621",
                             "; ".join(parts) + " (8 minus 3)", combine(verdicts)))
    return rows


def memo_claims(memo: Any) -> list[ClaimRow]:
    """The memorization check's claims: the statistics' gain holds on held-out clients, which score lower."""
    rows = []
    for part, name in (("label_shift", "E1"), ("label_permutation", "E3b")):
        cpcs = sorted(memo["cpc"].unique())
        ours, v = per_part({f"{cpc}/cluster": memo_gain(memo, part, cpc) for cpc in cpcs}, lambda d: at_least(d, 0.0))
        rows.append(DECLARED.row("ours", f"{name}: the gain from the statistics holds on clients held out of training "
                                 "(Cond-pooled minus Cond-pooled-none, held-out clients; not memorization)",
                                 "not tested in the paper", ours, v))
        pooled = {cpc: memo_runs(memo, "Cond-pooled", part, cpc) for cpc in cpcs}
        ours, v = per_part({f"{cpc}/cluster": list(sub["held_out"] - sub["seen"]) for cpc, sub in pooled.items()},
                           below)
        rows.append(DECLARED.row("ours", f"{name}: Cond-pooled scores lower on held-out clients than on its training "
                                 "clients (held-out minus training)", "not tested in the paper", ours, v))
    return rows


# ------------------------------------------------------------------------------------------ tables
def experiment_table(runs: Any, exp: Experiment) -> list[str]:
    """Mean ± half-width per method and column, the paper's like-for-like number in brackets."""
    cols = ordered_cols(runs, exp.key)
    paper = PAPER.get(exp.key, {})
    rows = []
    for kind, variants in (("federated", FEDERATED), ("pooled", POOLED)):
        for v in variants:
            cells = []
            for c in cols:
                s = scores(runs, exp.key, v, c)
                n_runs = len(cell_runs(runs, exp.key, v, c))
                if not n_runs:
                    cells.append("—")
                    continue
                cell = fmt_ci(list(s.values())) if s else "no score"
                if len(s) < n_runs:  # a run without a score: some device's model diverged (summary diverged_nodes)
                    cell += f" ({n_runs - len(s)}/{n_runs} runs diverged)"
                ref = exp.paper_rows.get(v)
                if ref in paper and c in exp.columns:
                    cell += f" ({paper[ref][exp.columns.index(c)]:.3f})"
                cells.append(cell)
            if any(c != "—" for c in cells):
                rows.append([kind, v, *cells])
    return markdown_table(rows, ["kind", "method", *cols])


def steps_table(runs: Any, exp: Experiment) -> list[str]:
    """SGD steps one model takes: pooled (rounds x epochs x ceil(N / batch)) vs one client's local steps."""
    cols = ordered_cols(runs, exp.key)
    pooled, client, total = [], [], []
    for c in cols:
        row = runs[(runs["exp"] == exp.key) & (runs["col"] == c)].iloc[0]
        n, epochs, batch = row["samples"], row["scenario.training.epochs"], row["scenario.training.batch_size"]
        rounds = row["scenario.protocol.rounds"]
        pooled.append(f"{rounds * epochs * math.ceil(sum(n) / batch)}")
        client.append(f"{rounds * epochs * math.ceil(n[0] / batch)}")
        total.append(f"{sum(n)} ({len(n)} x {n[0]})")
    return ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),  # (an empty first header: '| |')
            "| training samples in all | " + " | ".join(total) + " |",
            "| pooled model (Oracle: per cluster, fewer) | " + " | ".join(pooled) + " |",
            "| one client's local steps (FedAvg family) | " + " | ".join(client) + " |"]


def dac_note(runs: Any, exp: Experiment) -> list[str]:
    """A line when DAC and the federated Oracle scored every device alike in every run (DAC found the clusters)."""
    cols = ordered_cols(runs, exp.key)
    pairs = [(scores(runs, exp.key, "DAC", c), scores(runs, exp.key, "Oracle-fed", c)) for c in cols]
    if not all(a and a == b for a, b in pairs):
        return []
    sub = runs[(runs["exp"] == exp.key) & (runs["variant"] == "DAC")]
    ari = sub["ari"].min() if "ari" in sub else math.nan
    return [f"DAC's score equals Oracle-fed's in every run here (lowest ARI {ari:.2f}): given K it averages with "
            "exactly its cluster-mates every round, which is FedAvg within the true clusters.", ""]


def bytes_line(runs: Any, exp: Experiment) -> str:
    """Each method's bytes at the experiment's first column."""
    col = ordered_cols(runs, exp.key)[0]
    parts = [f"{v} {sub['bytes_total'].mean() / 1e6:.1f} MB" for v in FEDERATED + POOLED
             if len(sub := cell_runs(runs, exp.key, v, col))]
    return f"Bytes at {col} (mean over seeds): " + ", ".join(parts)


def figure(runs: Any, exp: Experiment, path: Path) -> None:
    """Mean and 95% interval per method over the experiment's columns: federated and pooled side by side."""
    cols = ordered_cols(runs, exp.key)
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (kind, variants) in zip(axes, (("federated", FEDERATED), ("pooled", POOLED))):
        for i, v in enumerate(variants):
            ys, los, his = bands([list(scores(runs, exp.key, v, c).values()) for c in cols])
            if all(math.isnan(y) for y in ys):
                continue
            x = list(range(len(cols)))
            colour = matplotlib.colormaps["tab20"](i % 20)  # 11 federated rows: tab10 would repeat a colour
            ax.plot(x, ys, "-o", color=colour, label=v, ms=3)
            ax.fill_between(x, los, his, color=colour, alpha=0.15)
        ax.set_xticks(range(len(cols)), cols, fontsize=8)
        ax.set_title(f"{kind} (mean, 95% interval over seeds)", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel(exp.metric)
    fig.suptitle(exp.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------ memorization
def load_memo(runs: Any, nodes: Any) -> Any:
    """Per-run accuracy on the training clients and on the held-out ones (one row per run)."""
    import pandas as pd

    rows = []
    for _, r in runs.iterrows():
        sub = nodes[nodes["path"] == r["path"]]
        rows.append({"variant": r["variant"], "partition": json.loads(r["grid.data.partition"])["kind"],
                     "cpc": int(r["grid.topology.n"]) // 2, "seed": int(r["seed"]),
                     "seen": float(sub.loc[~sub["held_out"], "value"].mean()),
                     "held_out": float(sub.loc[sub["held_out"], "value"].mean())})
    return pd.DataFrame(rows)


def memo_runs(memo: Any, variant: str, part: str, cpc: int) -> Any:
    """The memorization runs (one per seed) of one method, partition and number of clients per cluster."""
    return memo[(memo["variant"] == variant) & (memo["partition"] == part) & (memo["cpc"] == cpc)]


def memo_gain(memo: Any, part: str, cpc: int) -> list[float]:
    """Cond-pooled minus Cond-pooled-none on the held-out clients, per seed."""
    a, b = (memo_runs(memo, v, part, cpc) for v in ("Cond-pooled", "Cond-pooled-none"))
    return paired(dict(zip(a["seed"], a["held_out"])), dict(zip(b["seed"], b["held_out"])))


def memo_table(memo: Any) -> list[str]:
    """Per partition, clients per cluster and pooled method: accuracy on the training and the held-out clients."""
    rows = [[part, cpc, v, fmt_ci(list(sub["seen"])), fmt_ci(list(sub["held_out"])),
             fmt_diff(list(sub["held_out"] - sub["seen"]))]
            for part in ("label_shift", "label_permutation") for cpc in sorted(memo["cpc"].unique()) for v in POOLED
            if len(sub := memo_runs(memo, v, part, cpc))]
    return markdown_table(rows, ["partition", "clients per cluster (1 held out)", "method", "training clients",
                                 "held-out clients", "held-out minus training"])


# ------------------------------------------------------------------------------------------ statistics
#: the seeds of the statistics-structure table (each draws its own data split)
STRUCTURE_SEEDS = (0, 1, 2)


def statistics_structure(seeds: tuple[int, ...] = STRUCTURE_SEEDS) -> dict[str, dict[str, list[float]]]:
    """Do the z-scored statistics carry the cluster? Per configuration, over ``seeds`` (each its own data split):
    k-means ARI against the true clusters, and the mean distance within and between clusters."""
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from p2pfl.conditioning import feature_matrix, pca_statistics
    from p2pfl.data import DataSpec, build_federation
    from p2pfl.protocols.server.conditional import normalize_statistics

    cases = [("E1 K=2 rich", {"kind": "label_shift", "n_clusters": 2}, 10, 600),
             ("E1 K=2 super sparse", {"kind": "label_shift", "n_clusters": 2}, 200, 30),
             ("E2b C1 [0, 180]", {"kind": "rotation", "angles": [0, 180]}, 10, 600),
             ("E2b C4 [0, 10, 180, 350]", {"kind": "rotation", "angles": [0, 10, 180, 350]}, 20, 300),
             ("E3a rich", {"kind": "semantic_concept"}, 10, 600),
             ("E3b K=2", {"kind": "label_permutation", "n_clusters": 2}, 10, 600),
             ("E3b K=5", {"kind": "label_permutation", "n_clusters": 5}, 25, 240)]
    out: dict[str, dict[str, list[float]]] = {}
    for label, part, n, spc in cases:
        got = out.setdefault(label, {"ari": [], "within": [], "between": []})
        for seed in seeds:
            fed = build_federation(DataSpec(dataset="fashion_mnist", partition=part, samples_per_client=spc), n,
                                   seed=seed)
            raw = np.stack([pca_statistics(feature_matrix(s.train_x, s.train_y, fed.num_classes), 32)
                            for s in fed.shards])
            z = normalize_statistics(raw, "zscore")
            t = np.asarray(fed.true_clusters)
            got["ari"].append(adjusted_rand_score(t, KMeans(len(set(t)), n_init=10, random_state=0).fit_predict(z)))
            d = np.linalg.norm(z[:, None] - z[None], axis=2)
            same, off = t[:, None] == t[None], ~np.eye(n, dtype=bool)
            got["within"].append(float(d[same & off].mean()))
            got["between"].append(float(d[~same].mean()))
    return out


def structure_table(structure: dict[str, dict[str, list[float]]]) -> list[str]:
    """``statistics_structure`` as a table: mean ± half-width of the 95% interval over its seeds."""
    return markdown_table([[label, *(fmt_ci(got[k], 1.0, 2) for k in ("ari", "within", "between"))]
                           for label, got in structure.items()], ["configuration", "ARI", "within", "between"])


# ------------------------------------------------------------------------------------------ report
def experiment_section(runs: Any, exp: Experiment, out: Path) -> list[str]:
    """One experiment's section (its figure written into ``out``), or the commands that would sweep it."""
    if not (runs["exp"] == exp.key).any():
        return [f"## {exp.title}", "", "Not swept yet: " + ", ".join(
            f"`p2pfl sweep {STUDY_DIR}/{s}.yaml --jobs 2 --out runs/conditional/{s} "
            f"--archive analysis/cells/conditional/{s}`" for s in exp.files), ""]
    png = f"conditional_{exp.key}.png"
    figure(runs, exp, out / png)
    return [f"## {exp.title}", "", f"Studies: {', '.join(f'`{STUDY_DIR}/{s}.yaml`' for s in exp.files)}.", "",
            *experiment_table(runs, exp), "", *([exp.note, ""] if exp.note else []), *dac_note(runs, exp),
            bytes_line(runs, exp), "", "SGD steps per model:", "", *steps_table(runs, exp), "", f"![{exp.key}]({png})",
            ""]


def write(dirs: list[Path], md: Path, no_statistics: bool = False) -> None:
    runs, memo = load(dirs)
    structure = None if no_statistics else statistics_structure()
    seeds = sorted(int(s) for s in runs["seed"].unique())
    md.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Conditional-PCA paper reproduction (Fashion-MNIST, reduced budget, studies)",
        "",
        "Regenerate: sweep every study in `scenarios/studies/conditional/` "
        "(`p2pfl sweep scenarios/studies/conditional/<name>.yaml --jobs 2 --out runs/conditional/<name> "
        "--archive analysis/cells/conditional/<name>`), then "
        f"`python analysis/reports/conditional_report.py analysis/cells/conditional`. Seeds {seeds}; every number is a "
        "mean over "
        "seeds ± the half-width of its 95% t-interval (3 seeds: t = 4.30); differences are paired by seed "
        "(a seed fixes the data split and the initial weights) and given as mean [interval] in accuracy points.",
        "",
        "**Budget:** model `mlp` (784-128-C; Conditional concatenates its statistics s to the input) in the K sweeps, "
        "E2b and MCDC, and in the second table of each sparsity sweep; the paper's `cnn28` in the first (studies "
        "`*_sparsity_cnn28.yaml`, the arms the claims read). 20 rounds x 1 local epoch, SGD lr 0.01, momentum 0.9, "
        "batch 64 (the paper: 20 epochs with the same optimizer); local test sets (each device's own distribution). "
        "K sweeps keep the paper's design: a fixed total of training data (6000 samples here, the whole dataset in "
        "the paper) split over K x 5 clients. Sparsity sweeps keep the paper's data design: the 60,000 training "
        "images split between 2 clusters, 5 clients a cluster (rich, 6,000 each) or 100 (super sparse, 300 each). "
        "Gossip and DAC run on a random 4-regular graph (DAC in the K sweeps over all devices), server methods "
        "through one server attached to every device. A cnn28 cell trains 20 x 60,000 samples (about 15 min on one "
        "core here). MCDC: the paper's workshop version conditions on the first PCA eigenvector; we use the top "
        "eigenvalues (the FLICS statistic), which do not see the direction of a cluster's regression weights.",
        "",
        "**Like for like.** The paper's Oracle and Conditional are pooled training (Sec. III-C: \"we use centralized "
        "pooling to isolate the conditioning effect\"; App. B-A: Oracle pools within each cluster), so the paper's "
        "number sits beside our `Oracle` (pooled within each true cluster) and `Cond-pooled` only. Its FedAvg, "
        "Gossip, Ditto, IFCA and DAC are federated, as ours. Our federated `Cond` (FedAvg rounds, z-scored "
        "statistics via the server) is compared with `Oracle-fed` (FedAvg within each true cluster). `-log`: "
        "log(1 + s) instead of z-scores; `-none`: the same model, data and steps with s = 0 (what the statistics "
        "add); `Centralized`: pooled training of the plain model. A pooled model takes many more SGD steps than a "
        "client does in FedAvg (table \"SGD steps\" below each experiment), so pooled and federated rows are not "
        "compared with each other here.",
        "",
        *["## Provenance", "", "Each archive's cells by the revision that made them, and the last `p2pfl archive verify` of a "
          "sample of them at a later revision (re-run and compared byte for byte):", "", *provenance_lines(dirs), ""],
        "## Claims",
        "",
        "Verdicts come from the 95% interval of the paired difference: a claim 'a >= b - margin' holds when the whole "
        "interval is above -margin, does not hold when it is wholly below, and is not resolved otherwise ('a < b' has "
        "margin 0); the statistics rows hold when k-means on the z-scored statistics reaches ARI >= "
        f"{STRUCTURE_ARI} in every seed. Each verdict is printed as computed. Beside it, the comparability declared "
        "for the row in this script before its results were read (`DECLARED`): like for like, or how the experiment "
        "differs (the budget above, the MLP in the sparsity sweeps, the MCDC setup); it qualifies every outcome "
        "alike. The sparsity claims are read twice: with the paper's cnn28 (first) and with the MLP (second). "
        "Cannot be tested here: the data is not on this machine.",
        "",
        *claims(runs, memo, None if structure is None else {k: v["ari"] for k, v in structure.items()}),
        "",
        *(line for exp in EXPERIMENTS for line in experiment_section(runs, exp, md.parent)),
    ]
    if memo is not None:
        lines += ["## Memorization check (held-out clients)", "",
                  f"Study: `{STUDY_DIR}/memorization.yaml`. One client per cluster is kept out of the pooled "
                  "training and scored with its own statistics (z-scored with the training clients' moments, as a "
                  "client joining later would be). If the statistics only identified the training clients, the "
                  "conditioned model's advantage over s = 0 would vanish on the held-out ones.", "",
                  *memo_table(memo), ""]
    lines += [] if structure is None else ["## Do the statistics carry the cluster?", "",
              f"z-scored statistics of every device (l = 32, seeds {list(STRUCTURE_SEEDS)}: each its own data split, "
              "mean ± half-width of the 95% interval), clustered with k-means (K = number of true "
              "clusters): ARI against the true clusters, and the mean distance between devices of the same and of "
              "different clusters. Permuting the one-hot columns (E3b) or the pixels (0/90/180/270-degree rotations) "
              "is an orthogonal change of Z's columns, so the spectrum is exactly invariant: those clusters are "
              "invisible to the statistics, and what differs between devices is sampling noise, unique per device "
              "(which the memorization check above shows the pooled model learns as a client id).", "",
              *structure_table(structure), ""]
    swept = set(runs["study"]) | ({"cond_memorization"} if memo is not None else set())
    missing = [s for s in [*(f for e in EXPERIMENTS for f in e.files), "memorization"] if f"cond_{s}" not in swept]
    if missing:
        lines += ["Not swept yet: " + ", ".join(f"`{s}`" for s in missing), ""]
    md.write_text("\n".join(lines) + "\n")
    print(f"wrote {md}")


if __name__ == "__main__":
    raise SystemExit(report_main(write, __doc__, Path(__file__).parents[1] / "results" / "conditional.md",
                                 flags={"no-statistics": "skip the statistics-structure table (reads data)"}))
