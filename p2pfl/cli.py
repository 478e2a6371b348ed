"""``p2pfl`` command line: thin; defaults live only in ``p2pfl.config``.

    p2pfl run SCENARIO [--out DIR] [--seed N] [--set key=value ...] [--unset key ...]
    p2pfl validate SCENARIO [--seed N] [--set key=value ...] [--unset key ...]
    p2pfl list protocols|datasets|partitions|topologies
    p2pfl topology show FILE --out x.png
    p2pfl data show SCENARIO --out x.png
    p2pfl robot demo TASK --out x.gif|x.png [--seed N]
    p2pfl report RUN_DIR [RUN_DIR ...] [--out x.png]
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
    val = sub.add_parser("validate", help="check a scenario (topology, data and protocol set-up included) without running it")
    _add_scenario_args(val)
    ls = sub.add_parser("list", help="list protocols, datasets, partitions or topologies")
    ls.add_argument("what", choices=["protocols", "datasets", "partitions", "topologies"])
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
    rep = sub.add_parser("report", help="compare run directories: a markdown table and accuracy vs time/bytes plots")
    rep.add_argument("runs", nargs="+", help="run directories written by 'p2pfl run'")
    rep.add_argument("--out", default=None, help="PNG with accuracy vs simulated time and vs bytes")
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
    from p2pfl.metrics.report import load_run, report_figure, report_table

    runs = [load_run(p) for p in args.runs]
    print(report_table(runs))
    if args.out:
        print(f"wrote {report_figure(runs, args.out)}")
    return 0


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from p2pfl.api import run
    from p2pfl.progress import RunProgress, print_summary

    with RunProgress(enabled=not args.quiet) as progress:
        result = run(args.scenario, seed=args.seed, overrides=args.overrides, unset=args.unset, out=args.out,
                     on_round=progress.advance, on_start=progress.start, argv=["p2pfl", *argv])
    if not args.quiet:
        print_summary(result)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from p2pfl.api import resolve
    from p2pfl.sim.kernel import Simulation

    sc = resolve(args.scenario, seed=args.seed, overrides=args.overrides, unset=args.unset)
    sim = Simulation(sc)  # builds topology, data, network and protocol: every check a run makes, no run
    topo, fed = sim.topology, sim.federation
    print(f"{args.scenario}: ok ({sc.protocol.name}, {topo.n_devices} devices, {len(topo.servers)} servers, "
          f"{topo.graph.number_of_edges()} links, {fed.dataset} with {fed.num_classes} classes)")
    return 0


def _cmd_list(what: str) -> int:
    rows: list[tuple[str, ...]]
    if what == "protocols":
        from p2pfl.registry import all_protocols

        kind = lambda c: "server|none" if c.needs_server and c.serverless_option else "server" if c.needs_server else "serverless"
        rows = [(name, kind(cls), cls.summary) for name, cls in sorted(all_protocols().items())]
    elif what == "datasets":
        from p2pfl.data import DATASETS

        rows = [(k, v) for k, v in sorted(DATASETS.items())]
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
        if args.command == "list":
            return _cmd_list(args.what)
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
