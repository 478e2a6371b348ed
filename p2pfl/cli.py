"""``p2pfl`` command line: thin; defaults live only in ``p2pfl.config``.

    p2pfl run SCENARIO [--out DIR] [--seed N] [--set key=value ...] [--unset key ...]
    p2pfl validate SCENARIO [--seed N] [--set key=value ...] [--unset key ...]
    p2pfl sweep STUDY [--jobs N|ray] [--out DIR] [--archive DIR] [--budget 2h30m] [--dry-run]
                                                                  (exit 1 when some cells failed)
    p2pfl archive verify DIR [--sample K] [--seed S] [--jobs N] [--cells ID ...] [--study FILE] [--write]
                                                  (exit 1 when a re-run cell's summary.json differs)
    p2pfl list protocols|datasets|partitions|topologies
    p2pfl list protocols NAME
    p2pfl topology show FILE --out x.png
    p2pfl data show SCENARIO --out x.png
    p2pfl robot demo TASK --out x.gif|x.png [--seed N]
    p2pfl report DIR [DIR ...] [--md F.md] [--csv F.csv] [--out x.png]
    p2pfl encoder train --dataset cifar100 --out enc.pt [--root DIR] [--epochs 50] [--limit N] [--seed 0]

A user error prints one line on stderr and exits with status 2; Ctrl-C prints one
line and exits with status 130 (a run directory is written whole or not at all).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from p2pfl.errors import UserError

__all__ = ["main"]


def _add_scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--seed", type=int, default=None, help="root seed (overrides the scenario's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field by dotted path, e.g. --set protocol.rounds=5; the value is YAML, "
                        "~ removes the key; --set topology=FILE loads a topology file (repeatable)")
    p.add_argument("--unset", dest="unset", action="append", default=[], metavar="KEY",
                   help="remove a field by dotted path before the --set overrides, e.g. --unset protocol.beta "
                        "after --set protocol.name=fedavg (repeatable)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="p2pfl", description="Discrete-event simulator for decentralized federated learning.")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario and write its run directory")
    _add_scenario_args(run)
    run.add_argument("--out", default=None, help="run directory (default runs/<name>-seed<N>-<time>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    run.add_argument("--evaluations", default=None, metavar="DIR", help="folder that keeps the results of the "
                     "federation's scoring jobs (robot rollouts): a rerun reads them instead of running them again, "
                     "to the same bytes")
    val = sub.add_parser("validate", help="check a scenario (topology, data and protocol set-up included) without running it")
    _add_scenario_args(val)
    sw = sub.add_parser("sweep", help="run a study (variants x grid x seeds) in parallel; rerun it to resume")
    sw.add_argument("study", help="study YAML file")
    sw.add_argument("--jobs", default=None, help="cells run at once (default: the number of cores), or 'ray': "
                    "every cell a Ray task (local Ray, or --ray-address)")
    sw.add_argument("--ray-address", default=None, help="with --jobs ray: a running cluster ('auto', "
                    "'ray://host:10001'; default RAY_ADDRESS, else a local Ray)")
    sw.add_argument("--out", default=None, help="folder of the cells' run directories (default runs/<study name>)")
    sw.add_argument("--dry-run", action="store_true", help="list the cells and validate them; write nothing")
    sw.add_argument("--archive", default=None, help="folder to keep every complete cell in without its event "
                    "stream (small enough to commit); the cells it holds are restored into --out and skipped; a cell "
                    "not complete yet keeps its robot rollouts in its .evaluations/ for a rerun")
    sw.add_argument("--budget", default=None, help="wall-time limit (2h30m, 90m, 5400): start only cells that "
                    "end within it at their variant's median cell time (one that does not fit is passed over "
                    "for a later one that does); rerun to resume the rest")
    arc = sub.add_parser("archive", help="tools for a study's archive of cells (p2pfl sweep --archive)")
    asub = arc.add_subparsers(dest="archive_command", required=True)
    ver = asub.add_parser("verify", help="re-run a seeded sample of archived cells at the current code and compare "
                                         "each new summary.json with the archived one (exit 1 if one differs)")
    ver.add_argument("archive", help="the archive: a folder of cells (e.g. analysis/cells/<study>)")
    ver.add_argument("--sample", type=int, default=None, metavar="K",
                     help="re-run K cells chosen by --seed (default: every cell)")
    ver.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0); the sample depends only "
                     "on the cell ids and this seed")
    ver.add_argument("--jobs", type=int, default=1, metavar="N", help="cells re-run at once, in worker processes "
                     "as a sweep's (default 1: one after the other); each uses its scenario's threads")
    ver.add_argument("--cells", nargs="+", default=None, metavar="ID", help="sample from these cells only")
    ver.add_argument("--study", default=None, metavar="FILE", help="the study file: its 'verify: {rtol, atol}' "
                     "lets summary numbers match within that tolerance (default: byte for byte)")
    ver.add_argument("--write", action="store_true", help="record the result in DIR/VERIFIED.json (the code "
                     "revision, the date, the sample and each cell's result)")
    ls = sub.add_parser("list", help="list protocols, datasets (available here or not), partitions or topologies")
    ls.add_argument("what", choices=["protocols", "datasets", "partitions", "topologies"])
    ls.add_argument("name", nargs="?", default=None,
                    help="with 'protocols': one protocol's parameters (type, default, description)")
    topo = sub.add_parser("topology", help="topology tools")
    tsub = topo.add_subparsers(dest="topology_command", required=True)
    show = tsub.add_parser("show", help="draw a topology file (servers marked) to a PNG")
    show.add_argument("file")
    show.add_argument("--out", required=True)
    show.add_argument("--seed", type=int, default=0)
    data = sub.add_parser("data", help="data tools")
    dsub = data.add_subparsers(dest="data_command", required=True)
    dshow = dsub.add_parser("show", help="draw a scenario's partition (label histograms per device, samples per cluster)")
    _add_scenario_args(dshow)
    dshow.add_argument("--out", required=True)
    rep = sub.add_parser("report", help="compare runs grouped across seeds: markdown tables (mean, sd, 95%% CI), "
                                        "CSV, score vs time/bytes plots")
    rep.add_argument("runs", nargs="+", help="run directories, or folders holding them (searched at any depth)")
    rep.add_argument("--md", default=None, help="also write the markdown tables to this file")
    rep.add_argument("--csv", default=None, help="one row per group: mean, sd and 95%% CI of each figure")
    rep.add_argument("--out", default=None, help="PNG: score vs simulated time and vs bytes, 95%% CI shaded")
    robot = sub.add_parser("robot", help="robot manipulation tools")
    rsub = robot.add_subparsers(dest="robot_command", required=True)
    rdemo = rsub.add_parser("demo", help="render a scripted-expert rollout of a task (suite/name) to a GIF or PNG strip")
    rdemo.add_argument("task", help="e.g. object/red; 'list' prints the tasks")
    rdemo.add_argument("--out", default="demo.gif")
    rdemo.add_argument("--seed", type=int, default=0)
    enc = sub.add_parser("encoder", help="the cross-trained encoder of 'conditional' on 32x32 RGB data")
    esub = enc.add_subparsers(dest="encoder_command", required=True)
    etrain = esub.add_parser("train", help="train it for classification on another dataset (Conditional-PCA App. B-C)")
    etrain.add_argument("--dataset", required=True, choices=["cifar10", "cifar100"],
                        help="cifar100 for CIFAR-10 scenarios and vice versa")
    etrain.add_argument("--root", default=None, help="folder of the dataset files (as data.root)")
    etrain.add_argument("--epochs", type=int, default=50)
    etrain.add_argument("--limit", type=int, default=None, help="train on a seeded random subset of N samples")
    etrain.add_argument("--seed", type=int, default=0)
    etrain.add_argument("--device", default="auto", help="cpu, cuda or auto")
    etrain.add_argument("--out", required=True, help="checkpoint file to write (e.g. enc.pt)")
    return ap


def _cmd_encoder_train(args: argparse.Namespace) -> int:
    from p2pfl.conditioning.encoder import save_encoder, train_encoder
    from p2pfl.sim.kernel import resolve_torch_device

    model = train_encoder(args.dataset, args.root, epochs=args.epochs, limit=args.limit, seed=args.seed,
                          device=resolve_torch_device(args.device))
    path = save_encoder(model, args.out)
    m = model.meta
    print(f"wrote {path} (encoder trained on {m['dataset']}, {m['samples']} samples, {m['epochs']} epochs; "
          f"final training accuracy {m['train_accuracy']:.4f})")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from p2pfl.metrics.report import write_report

    text, written = write_report(args.runs, md=args.md, csv=args.csv, png=args.out)
    print(text)
    for path in written:
        print(f"wrote {path}")
    return 0


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from p2pfl.api import resolve, run
    from p2pfl.progress import RunProgress, print_summary

    sc = resolve(args.scenario, seed=args.seed, overrides=args.overrides, unset=args.unset)
    with RunProgress(enabled=not args.quiet, rounds=sc.protocol.rounds) as progress:
        result = run(sc, out=args.out, on_round=progress.advance, on_start=progress.start,
                     on_setup=progress.setup, argv=["p2pfl", *argv], evaluations=args.evaluations)
    if not args.quiet:
        print_summary(result)
    return 0


def _cmd_sweep(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from p2pfl.study import SweepInterrupted, describe, sweep
    from p2pfl.study.times import parse_duration

    budget_s = None if args.budget is None else parse_duration(args.budget)
    try:
        result = sweep(args.study, jobs=args.jobs, out=args.out, dry_run=args.dry_run, progress=True,
                       argv=["p2pfl", *argv], ray_address=args.ray_address, archive=args.archive,
                       budget_s=budget_s)
    except SweepInterrupted as err:
        print(f"p2pfl: interrupted; {err}", file=sys.stderr)
        return 130
    if args.dry_run:
        print(describe(result))
    return 0 if result.ok else 1


def _cmd_archive_verify(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from p2pfl.study.verify import (
        choose_cells,
        format_verification,
        tolerance_for,
        verify_archive,
        write_verified,
    )

    ids, chosen = choose_cells(args.archive, sample=args.sample, seed=args.seed, cells=args.cells)  # bad input first
    tolerance, about = None, "byte-exact"
    if args.study is not None:
        tolerance = tolerance_for(args.archive, args.study)
        about = f"byte-exact ({args.study} declares no 'verify')" if tolerance is None else \
            f"numbers within {tolerance.text()} (from {args.study})"
    of = f"{len(args.cells)} given with --cells" if args.cells is not None else f"{len(ids)}"
    print(f"{args.archive}: {len(chosen)} of {of} cells, sampled with seed {args.seed}; compared {about}", flush=True)
    result = verify_archive(args.archive, sample=args.sample, seed=args.seed, jobs=args.jobs, cells=args.cells,
                            tolerance=tolerance, progress=True, argv=["p2pfl", *argv])
    print(format_verification(result))
    if args.write:
        print(f"wrote {write_verified(result, ['p2pfl', *argv])}")
    return 0 if result.ok else 1


def _cmd_validate(args: argparse.Namespace) -> int:
    from p2pfl.api import resolve
    from p2pfl.engines import build_only
    from p2pfl.tensor.simulation import TensorSimulation

    sc = resolve(args.scenario, seed=args.seed, overrides=args.overrides, unset=args.unset)
    sim = build_only(sc)  # builds what a run builds (topology, data, network and protocol): every check, no run
    if isinstance(sim, TensorSimulation):
        print(f"{args.scenario}: ok ({sc.protocol.name}, {sim.n} devices, engine tensor, "
              f"{len(sim.adjacency.indices) // 2} links, {sim.data.dataset} with {sim.data.num_classes} classes)")
        return 0
    topo, fed = sim.topology, sim.federation
    print(f"{args.scenario}: ok ({sc.protocol.name}, {topo.n_devices} devices, {len(topo.servers)} servers, "
          f"{topo.graph.number_of_edges()} links, {fed.dataset} with {fed.num_classes} classes)")
    return 0


def _type_text(annotation: object) -> str:
    """A field's type as YAML users read it: ``int``, ``sync | async``, ``float | null``."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type_text(a) for a in args)}]"
    return str(getattr(annotation, "__name__", annotation)).replace("typing.", "")


def _default_text(info: object) -> str:
    """A field's default as YAML (``null``, ``true``, ``{a: 1}``), or ``(required)``."""
    import yaml
    from pydantic.fields import FieldInfo
    from pydantic_core import PydanticUndefined

    assert isinstance(info, FieldInfo)
    if info.default is PydanticUndefined and info.default_factory is None:
        return "(required)"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, str):
        return value or '""'
    return str(yaml.safe_dump(value, default_flow_style=True, width=1 << 16)).removesuffix("\n...\n").strip()


def _bounds_text(info: object) -> str:
    """A field's numeric bounds (``>= 1, <= 1000000``) from its pydantic metadata."""
    ops = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "multiple of"))
    return ", ".join(f"{sign} {getattr(m, attr)}" for m in getattr(info, "metadata", ()) for attr, sign in ops
                     if hasattr(m, attr))


def _print_protocol(name: str) -> None:
    """``p2pfl list protocols NAME``: summary, server need and every parameter (inherited ones too)."""
    from p2pfl.errors import ConfigError
    from p2pfl.registry import BUILTIN, get_protocol, plugin_protocols

    names = sorted({*BUILTIN, *plugin_protocols()})
    if name not in names and ":" not in name:
        raise ConfigError(f"unknown protocol {name!r}; valid: {', '.join(names)} (or package.module:Class for your own)")
    cls = get_protocol(name, "p2pfl list protocols")
    if cls.needs_server and cls.serverless_option:
        server = "yes for some settings (see the parameters), otherwise none"
    elif cls.needs_server:
        server = "yes (the topology needs servers: [{attach: all}])"
    else:
        server = "no"
    print(f"{name}: {cls.summary or cls.__doc__ or ''}".rstrip())
    print(f"needs a server: {server}")
    print(f"runs under dynamics: {'yes' if cls.supports_dynamics else 'no'}")
    print(f"parameters (protocol: {{name: {name}, ...}}):")
    rows = [("name", "type", "default", "description")]
    for field, info in cls.Params.model_fields.items():
        if field == "name":
            continue
        bounds = _bounds_text(info)
        about = " ".join(x for x in (info.description or "", f"[{bounds}]" if bounds else "") if x)
        rows.append((field, _type_text(info.annotation), _default_text(info), about or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  " + "  ".join(f"{x:<{w}}" for x, w in zip(r, widths)) + "  " + r[3])


def _dataset_availability(name: str) -> tuple[str, str]:
    """Whether ``name`` can be loaded here without a download (file existence only), and where or how."""
    import importlib.util

    from p2pfl.data import datasets as ds

    cache = Path(ds.DEFAULT_DOWNLOAD_ROOT).expanduser()

    def idx_in(folder: Path) -> bool:
        return all((folder / f).is_file() or (folder / f[:-3]).is_file() for f in ds.IDX_FILES)

    if name in ("digits", "digits28"):
        if importlib.util.find_spec("sklearn") is None:
            return "no", "needs scikit-learn (pip install scikit-learn)"
        return "yes", "bundled with scikit-learn"
    if ds.DATASET_INFO[name].synthetic:
        return "yes", "generated from the seed"
    if name in ("fashion_mnist", "mnist"):
        system, folder = ((ds.FASHION_MNIST_SYSTEM_DIR, "FashionMNIST") if name == "fashion_mnist"
                          else (ds.MNIST_SYSTEM_DIR, "MNIST"))
        if idx_in(Path(system)):
            return "yes", f"found in {system}"
        if idx_in(cache / folder / "raw"):
            return "yes", f"with data.download: true (cached in {cache / folder / 'raw'}, no network needed)"
        get = "apt-get install dataset-fashion-mnist, or " if name == "fashion_mnist" else ""
        return "no", f"{get}needs its IDX files ({', '.join(ds.IDX_FILES)}) under data.root, or data.download: true"
    if name in ("cifar10", "cifar100"):
        folder, files = (("cifar-10-batches-py", ds.CIFAR10_FILES) if name == "cifar10"
                         else ("cifar-100-python", ds.CIFAR100_FILES))
        for where in (cache / folder, cache):
            if all((where / f).is_file() for f in files):
                return "yes", f"found in {where}"
        return "no", f"needs {folder}/ ({', '.join(files)}) under data.root, or data.download: true"
    if name == "robotics":
        from p2pfl.robotics.gl import GL_HELP, gl_backend_error

        err = gl_backend_error()
        if err is not None:
            return "no", f"{GL_HELP}; here: {err}"
        return "yes", "demos generated by scripted experts on first use, cached under ~/.cache/p2pfl/robotics"
    return "?", "no availability check for this dataset"


def _cmd_list(what: str, name: Optional[str] = None) -> int:
    rows: list[tuple[str, ...]]
    if name is not None and what != "protocols":
        from p2pfl.errors import ConfigError

        raise ConfigError(f"'p2pfl list {what}' takes no NAME; got {name!r}; only 'p2pfl list protocols NAME' does")
    if what == "protocols":
        if name is not None:
            _print_protocol(name)
            return 0
        from p2pfl.registry import all_protocols

        kind = lambda c: "server|none" if c.needs_server and c.serverless_option else "server" if c.needs_server else "serverless"
        engines = lambda c: "events|tensor" if c.tensor_program is not None else "events"
        rows = [(name, kind(cls), engines(cls), cls.summary) for name, cls in sorted(all_protocols().items())]
    elif what == "datasets":
        from p2pfl.data import DATASETS

        rows = [(k, *_dataset_availability(k), v) for k, v in sorted(DATASETS.items())]
        rows = [(k, ok, f"{about}; {how}") for k, ok, how, about in rows]
    elif what == "partitions":
        from p2pfl.data import PARTITIONS

        rows = [(k, v) for k, v in sorted(PARTITIONS.items())]
    else:
        from p2pfl.topology import BUILDERS

        rows = [(k, v) for k, v in sorted(BUILDERS.items())]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(f"{x!s:<{w}}" for x, w in zip(r, widths)) + "  " + str(r[-1]))
    return 0


def _cmd_topology_show(args: argparse.Namespace) -> int:
    from p2pfl.topology import build_topology, draw_topology, load_topology_file

    topo = build_topology(load_topology_file(args.file), seed=args.seed)
    draw_topology(topo, Path(args.out), title=Path(args.file).name)
    print(f"wrote {args.out} ({topo.n_devices} devices, {topo.graph.number_of_edges()} links, {len(topo.servers)} servers)")
    return 0


def _cmd_data_show(args: argparse.Namespace) -> int:
    from p2pfl.api import resolve
    from p2pfl.data import build_federation
    from p2pfl.data.show import federation_table, show_federation
    from p2pfl.topology import build_topology

    sc = resolve(args.scenario, seed=args.seed, overrides=args.overrides, unset=args.unset)
    topo = build_topology(sc.topology, seed=sc.seed)
    fed = build_federation(sc.data, topo.n_devices, seed=sc.seed)
    show_federation(fed, Path(args.out))
    print(federation_table(fed))
    print(f"wrote {args.out}")
    return 0


def _cmd_robot_demo(args: argparse.Namespace) -> int:
    from p2pfl.errors import ConfigError
    from p2pfl.robotics.suites import TASKS

    if args.task == "list":
        for tid, task in TASKS.items():
            print(f"{tid:<20}  {task.instruction}")
        return 0
    if args.task not in TASKS:
        raise ConfigError(f"unknown task {args.task!r}; valid: {', '.join(TASKS)}")
    from p2pfl.robotics.show import expert_rollout_frames, save_frames

    frames, ok = expert_rollout_frames(args.task, seed=args.seed)
    save_frames(frames, Path(args.out))
    print(f"wrote {args.out} ({len(frames)} frames, {'success' if ok else 'failure'}): {TASKS[args.task].instruction}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``p2pfl`` console script and ``python -m p2pfl``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args, argv)
        if args.command == "validate":
            return _cmd_validate(args)
        if args.command == "sweep":
            return _cmd_sweep(args, argv)
        if args.command == "archive":
            return _cmd_archive_verify(args, argv)
        if args.command == "list":
            return _cmd_list(args.what, args.name)
        if args.command == "topology":
            return _cmd_topology_show(args)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "encoder":
            return _cmd_encoder_train(args)
        if args.command == "robot":
            return _cmd_robot_demo(args)
        return _cmd_data_show(args)
    except UserError as err:
        print(f"p2pfl: error: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        what = "; no run directory written" if args.command == "run" else ""
        print(f"p2pfl: interrupted{what}", file=sys.stderr)
        return 130
    except MemoryError:
        print("p2pfl: error: out of memory; make the scenario smaller (topology n, model.hidden, "
              "data.samples_per_client)", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
