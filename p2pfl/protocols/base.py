"""The protocol interface (design guide, "the heart").

A protocol is one class: its ``Params`` (validated YAML), and generators
``device(ctx)`` / ``server(ctx)`` that read as the algorithm (the event kernel's
execution); where the algorithm is a round over arrays, it also names its tensor
program (``tensor_program``), the same algorithm run by the tensor engine. It is built from
its params and a read-only :class:`~p2pfl.sim.runinfo.RunInfo`, never from the
Simulation; at run time everything goes through the node's context. Decisions
(peer choice, aggregation, cluster assignment) are pure methods the loops call,
so they are testable without SimPy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Optional, TypeVar

from pydantic import Field

from p2pfl.errors import ConfigError
from p2pfl.validation import Strict

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from torch import nn

    from p2pfl.sim.context import DeviceContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["ProtocolParams", "Protocol", "Process"]

#: What ``device`` and ``server`` return: a SimPy process body.
Process = Generator[Any, Any, Any]


class ProtocolParams(Strict):
    """Fields every protocol shares; a protocol's own Params subclass this."""

    name: str = Field(description="the protocol (p2pfl list protocols), or 'package.module:Class' for your own")
    rounds: int = Field(10, ge=1, le=1_000_000, description="communication rounds")
    eval_every: int | None = Field(None, ge=1, description="evaluate every k rounds (final round always)")


P = TypeVar("P", bound=ProtocolParams)


class Protocol(ABC, Generic[P]):
    """Base class: subclasses set ``name``, ``Params`` and implement ``device`` (and ``server``).

    ``class MyProtocol(Protocol[MyParams])`` makes ``self.params.my_field`` type-check.
    """

    name: ClassVar[str]
    Params: ClassVar[type[ProtocolParams]] = ProtocolParams
    needs_server: ClassVar[bool] = False
    #: True when some parameter settings run without a server (``p2pfl list protocols`` says so)
    serverless_option: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    #: Runs under ``dynamics:`` (it chooses live peers and never awaits a message without a deadline).
    supports_dynamics: ClassVar[bool] = False
    #: The summary's fields on the federations found (``clusters()``), in order; the kernel scores them:
    #: ``clusters``, ``ari``, ``misclassification_rate``, ``n_federations``, and ``clustering_events`` (every
    #: ``ctx.report_clusters`` of the run with its scores).
    cluster_fields: ClassVar[tuple[str, ...]] = ("clusters", "ari")
    #: Its models may be rows of one table (``p2pfl.learning.rows``): it uses a model only through
    #: ``live_state``, the state maths, ``ctx.train`` and ``ctx.evaluate``, and calls it, nothing else.
    model_rows: ClassVar[bool] = False
    #: Its tensor program (``engine: tensor``): ``"package.module:Class"`` of a ``p2pfl.tensor.program.RoundProgram``
    #: kept beside this protocol's module (``gossip_tensor.py`` beside ``gossip.py``), which says what it cannot
    #: express (``RoundProgram.unsupported``); None: the tensor engine refuses the protocol in one line. Never
    #: inherited (``__init_subclass__``): a subclass changes the algorithm, so it names its own program or has none.
    tensor_program: ClassVar[Optional[str]] = None
    #: It says which model each device holds now (``current_model``), so the evaluation grid
    #: (``evaluation.every_s``, ``p2pfl.sim.grid``) can score it. Never inherited (``__init_subclass__``): a
    #: subclass may score other models than its parent's, so it says so itself.
    current_models: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass runs its own algorithm: it has no tensor program, and does not say which model each device
        holds now, unless it declares so itself."""
        super().__init_subclass__(**kwargs)
        if "tensor_program" not in vars(cls):
            cls.tensor_program = None
        if "current_models" not in vars(cls):
            cls.current_models = False

    def __init__(self, params: P, run: RunInfo) -> None:
        self.params = params
        self.run = run
        #: True when the run has a ``dynamics:`` block (set by ``check_dynamics``).
        self.dynamic = False

    #: The params field by which ``implementation`` chooses between algorithms (None: it does not choose).
    implementation_field: ClassVar[Optional[str]] = None

    @classmethod
    def implementation(cls, params: ProtocolParams) -> type[Protocol[Any]]:
        """The class that runs ``params`` (a YAML name may choose between algorithms by a field)."""
        return cls

    def requires_server(self) -> bool:
        """Does this instance need a server node? (``needs_server``; some protocols decide from params.)"""
        return self.needs_server

    @abstractmethod
    def device(self, ctx: DeviceContext) -> Process:
        """SimPy process body of one device."""

    def server(self, ctx: ServerContext) -> Process:
        """SimPy process body of one server (only when ``needs_server``)."""
        raise NotImplementedError(f"protocol {self.name!r} has no server process")
        yield  # pragma: no cover

    def deadline_fields(self) -> tuple[str, ...]:
        """Params fields (timeouts) that must be set under dynamics, where any message may be dropped."""
        return ()

    def work_flops(self, samples: int) -> float:
        """Modelled FLOPs of this protocol's own ``ctx.work`` jobs over a run, estimated before it from the
        fleet's ``samples`` training samples in all (0: none); ``auto`` weighs them to start workers."""
        return 0.0

    def check_dynamics(self) -> None:
        """Refuse, with a one-line fix, to run under dynamics when this protocol cannot."""
        if not self.supports_dynamics:
            raise ConfigError(f"field 'dynamics': protocol {self.name!r} does not run under dynamics (it would "
                              "await or misapply dropped messages); remove dynamics or use another protocol "
                              "(p2pfl list protocols)")
        self.dynamic = True
        for name in self.deadline_fields():
            if getattr(self.params, name, None) is None:
                raise ConfigError(f"field 'protocol.{name}': required under dynamics (a dropped message would be "
                                  f"awaited forever); set it, e.g. protocol.{name}: 30")

    def progress_total(self) -> int:
        """How many ``ctx.round_done`` calls a full run makes (for the progress bar)."""
        if self.needs_server:
            return self.params.rounds * max(1, len(self.run.servers))
        return self.params.rounds * self.run.n_devices

    def should_eval(self, round: int) -> bool:
        """Evaluate after ``round`` (1-based)? Every ``eval_every`` rounds and always after the last."""
        every = self.params.eval_every
        return round == self.params.rounds or (every is not None and round % every == 0)

    def current_model(self, device: int) -> Optional[nn.Module]:
        """The model ``device`` would be scored with now: what its evaluations score (its own model in a serverless
        protocol, the server's latest model for it in a server protocol), read by the evaluation grid
        (``p2pfl.sim.grid``) without changing it; None where it has none yet. Only where ``current_models``."""
        raise NotImplementedError(f"protocol {self.name!r} does not say which model each device holds now")

    def artifacts(self) -> dict[str, bytes]:
        """Extra files for the run directory (name -> bytes), e.g. a novelty matrix; none by default."""
        return {}

    def result(self) -> dict[str, Any]:
        """Protocol-specific summary fields (e.g. messages that did not arrive); empty by default."""
        return {}

    def clusters(self) -> Optional[list[list[int]]]:
        """The federations found by the end of the run (lists of device ids, every device once), or None
        (the protocol does not cluster, or found none). The kernel scores them against the true clusters,
        which protocols never read, for the summary's ``cluster_fields``."""
        return None

    def restart_clusters(self) -> Optional[list[list[list[int]]]]:
        """The final federations of each of the protocol's restarts (independent initialisations of one run, e.g.
        IFCA's ``restarts``), in restart order, or None (one run). The kernel scores each against the true
        clusters (the summary's ``restart_scores``); the protocol chooses between them by what it measured."""
        return None

    def novelty(self) -> Optional[tuple[np.ndarray, str]]:
        """The novelty matrix this protocol built (nan: not scored) and a title, or None; the kernel writes
        it (``novelty.npy``) with its heatmap, the devices ordered by true cluster."""
        return None
