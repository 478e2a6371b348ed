"""Client-conditional FL on local PCA statistics (Conditional-PCA paper, Secs. III-IV).

Prepare (Sec. III-A): every device builds Z = [phi(x) || onehot(y)] from its
training data and keeps the top-l eigenvalues of its covariance
(``pca_statistics``), charged as ``pca_flops`` of compute. phi is the identity
on flattened inputs, except for 32x32 RGB data, where the paper uses a frozen
cross-trained encoder (App. B-C): ``encoder: PATH`` names a checkpoint written
by ``p2pfl encoder train`` (a relative path is resolved against the working
directory), phi(x) is its 128-d embedding and its forward FLOPs per training
sample are charged with the statistics; it is agreed upon in advance and never
travels (no bytes). An encoder trained on the scenario's own dataset is refused
(leakage). ``encoder: identity`` uses raw pixels for 32x32 RGB data explicitly. The paper z-scores them across clients
(App. B-C), which needs the population mean and spread:

- ``normalization: zscore`` with ``transport: server``: each device sends its s
  and s^2 (2l float32) to the server, which returns the mean and standard
  deviation (2l float32). The server sees each device's s here; with secure
  aggregation it would see only the sums (the bytes are the same).
- ``normalization: zscore`` with ``transport: gossip``: the devices run
  ``moment_rounds`` rounds of pairwise push-pull averaging of [s, s^2] over the
  topology (2l float32 each way per exchange); the estimate is approximate.
- ``normalization: log``: s -> log(1 + s), no communication at all.
- ``normalization: none``: s = 0 for every device, the ablation without
  statistics (the same model, draws and steps; no communication).

Train (Sec. III-B/C): one model with s concatenated before its FC layers
(``conditioned_model``); s is not in the state dict and never travels.

- ``mode: federated, transport: server``: FedAvg rounds (this class is a
  FedAvg variant: same messages and bytes).
- ``mode: federated, transport: gossip``: the Gossip protocol's exchange over
  the topology, on the conditioned model.
- ``mode: pooled``: the paper's evaluation protocol, one model trained on the
  union of all devices' (x, s_i, y). The data are assumed to be in one place
  already: no message is sent (0 bytes; the bytes an upload of the data and
  statistics would cost are logged as ``pooled_upload_bytes``), the moments are
  computed there directly, each device is charged its own statistics and
  device 0, as the data centre, the training (``rounds`` x ``training.epochs``
  epochs over the pooled set). ``held_out_per_cluster`` leaves devices out of
  the pooled set (``reference/pooled.py``): they compute their statistics and
  are scored, z-scored with the training devices' moments, as a new client
  joining after training would be.

Infer: every device is scored with the shared model and its own s.
"""

from __future__ import annotations

import json
import operator
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, cast

import numpy as np
import torch
from pydantic import Field
from torch import nn

from p2pfl.conditioning import (
    ConditionedModel,
    conditioned_model,
    embed,
    feature_matrix,
    load_encoder,
    log_normalize,
    pca_flops,
    pca_statistics,
    population_moments,
    zscore_normalize,
)
from p2pfl.errors import ConfigError
from p2pfl.learning.aggregate import State
from p2pfl.learning.train import train_local
from p2pfl.protocols.base import Process
from p2pfl.protocols.reference.pooled import HELD_OUT_HELP, held_out_devices, pooled_xy
from p2pfl.protocols.server.fedavg import FedAvgBase, FedAvgParams
from p2pfl.protocols.serverless.gossip import Gossip, GossipParams, select_peer
from p2pfl.sim.cost import HEADER_BYTES, forward_flops_per_sample, payload_bytes, train_flops

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext, NodeContext, ServerContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["Conditional", "ConditionalParams", "normalize_statistics"]


class ConditionalParams(FedAvgParams):
    components: int = Field(32, ge=1, description="l: eigenvalues kept")
    normalization: Literal["zscore", "log", "none"] = Field(
        "zscore", description="zscore across devices (the paper), log(1 + s) (no communication), or none (s = 0: "
                              "the ablation without statistics)")
    mode: Literal["federated", "pooled"] = "federated"
    held_out_per_cluster: int = Field(0, ge=0, description=f"mode pooled only: {HELD_OUT_HELP}")
    transport: Literal["server", "gossip"] = "server"
    oversample: int = Field(10, ge=0, description="randomized SVD oversampling")
    power_iterations: int = Field(4, ge=0, description="randomized SVD subspace iterations")
    moment_rounds: int = Field(10, ge=1, description="gossip + zscore: pairwise averaging rounds of [s, s^2]")
    moments_timeout_s: Optional[float] = Field(
        None, gt=0, description="under dynamics, server + zscore: how long the server collects the devices' "
                                "moments (from the start; default round_timeout_s)")
    encoder: Optional[str] = Field(None, description="phi for 32x32 RGB data: a 'p2pfl encoder train' checkpoint "
                                   "(relative to the working directory), or 'identity' for raw pixels")


_RGB = (3, 32, 32)


def _load_phi(spec: Optional[str], run: RunInfo) -> Optional[nn.Module]:
    """The frozen encoder named by ``encoder:`` (None: identity), checked against the run's data (App. B-C)."""
    shape = tuple(run.input_shape)
    if spec == "identity":
        return None
    if spec is None:
        if shape == _RGB:
            raise ConfigError("protocol 'conditional' on 32x32 RGB data: the paper computes the statistics on the "
                              "embeddings of a cross-trained encoder (App. B-C); train one with 'p2pfl encoder train "
                              "--dataset cifar100 --out enc.pt' (cifar10 for CIFAR-100 scenarios) and set "
                              "protocol.encoder: enc.pt, or set protocol.encoder: identity for raw pixels")
        return None
    if shape != _RGB:
        raise ConfigError(f"protocol.encoder needs 3x32x32 images; this scenario's input shape is {shape}; "
                          "remove protocol.encoder")
    path = Path(spec).expanduser()
    encoder = load_encoder(path)
    trained_on = str(encoder.meta.get("dataset", ""))
    used = {run.dataset, *run.dataset.split("+")}
    if trained_on in used:
        other = "cifar100" if trained_on == "cifar10" else "cifar10"
        raise ConfigError(f"protocol.encoder {path} was trained on {trained_on!r}, the scenario's own dataset: "
                          f"its embeddings would leak the federated data (App. B-C); train one on another dataset "
                          f"with 'p2pfl encoder train --dataset {other}'")
    return encoder


def normalize_statistics(raw: np.ndarray, how: str, fit: Optional[list[int]] = None) -> np.ndarray:
    """Rows of raw eigenvalues (one per client) -> z-scored with the moments of rows ``fit`` (default all),
    log(1 + s), or zeros (``none``)."""
    raw = np.asarray(raw, dtype=np.float64)
    if how == "log":
        return log_normalize(raw)
    if how == "none":
        return np.zeros_like(raw)
    rows = raw if fit is None else raw[fit]
    mean, std = population_moments(rows.sum(axis=0), (rows**2).sum(axis=0), rows.shape[0])
    return zscore_normalize(raw, mean, std)


class _ConditionedContext:
    """A device context whose ``new_model`` builds the conditioned model (lets Gossip run on it unchanged)."""

    def __init__(self, ctx: DeviceContext, protocol: Conditional) -> None:
        self._ctx = ctx
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def new_model(self, independent: bool = False) -> nn.Module:
        return self._protocol.make_model(self._ctx, independent=independent)


class _PooledView(nn.Module):
    """Pooled training set as indices: forward(idx) = model(x[idx] with s[idx])."""

    def __init__(self, model: ConditionedModel, x: torch.Tensor, s: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.x = x
        self.s = s

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.forward_with(self.x[idx], self.s[idx])


class Conditional(FedAvgBase[ConditionalParams]):
    """One shared model conditioned on each device's local PCA eigenvalues."""

    name = "conditional"
    supports_dynamics = True
    Params = ConditionalParams
    # needs_server (True, from FedAvg) is narrowed per instance: only federated + server transport runs one.
    needs_server = True
    serverless_option = True
    summary = "Conditional: shared model conditioned on local PCA eigenvalues (FedAvg, gossip or pooled)"

    def __init__(self, params: ConditionalParams, run: RunInfo) -> None:
        super().__init__(params, run)
        self.held_out = held_out_devices(run, params.held_out_per_cluster, pooled=params.mode == "pooled")
        if self.requires_server() and not run.servers:
            raise ConfigError("protocol 'conditional' with transport 'server' needs a server; add "
                              "'servers: [{attach: all}]' to the topology or set protocol.transport: gossip")
        self.raw: dict[int, np.ndarray] = {}
        self.stats: dict[int, np.ndarray] = {}
        self._prep: dict[int, Any] = {}
        self.encoder = _load_phi(params.encoder, run)
        self.encoder_flops = 0
        if self.encoder is not None:
            self.encoder_flops = forward_flops_per_sample(self.encoder, _RGB)
            self.encoder = self.encoder.to(run.torch_device)
        self._gossip = Gossip(GossipParams(name="gossip", rounds=params.rounds, eval_every=params.eval_every,
                                           reply_timeout_s=params.round_timeout_s), run)
        self._moments: Optional[dict[str, torch.Tensor]] = None  # the server's mean and std (zscore)

    def deadline_fields(self) -> tuple[str, ...]:
        return () if self.params.mode == "pooled" else ("round_timeout_s",)

    def check_dynamics(self) -> None:
        """Under dynamics (module docstring): moments and gossip replies have deadlines; the server's
        round message carries the moments, so a device that missed them normalizes late."""
        super().check_dynamics()
        self._gossip.dynamic = True

    def requires_server(self) -> bool:
        """Only the federated mode over the server transport runs a server."""
        return self.params.mode == "federated" and self.params.transport == "server"

    # --- model ---------------------------------------------------------------------------------
    def make_model(self, ctx: NodeContext, independent: bool = False) -> ConditionedModel:
        """The conditioned model (common init); a device's copy carries its own statistics."""
        run = self.run
        seed = run.seed_for("init", ctx.id) if independent else run.seed_for("init")
        model = conditioned_model(run.model, run.input_shape, run.num_classes, self.params.components, seed=seed)
        model = model.to(run.torch_device)
        if ctx.id in self.stats:
            model.set_statistics(self.stats[ctx.id])
        return model

    def progress_total(self) -> int:
        if self.params.mode == "pooled":
            return self.params.rounds
        return super().progress_total()

    # --- prepare: statistics and their normalization -------------------------------------------
    def local_statistics(self, ctx: DeviceContext) -> Process:
        """Raw top-l eigenvalues of this device's Z (phi = encoder if any), charged as compute."""
        p, shard = self.params, ctx.shard
        x = shard.train_x if self.encoder is None else embed(self.encoder, shard.train_x)
        z = feature_matrix(x, shard.train_y, self.run.num_classes)
        raw = pca_statistics(z, p.components, oversample=p.oversample, power_iterations=p.power_iterations)
        flops = pca_flops(z.shape[0], z.shape[1], p.components, oversample=p.oversample,
                          power_iterations=p.power_iterations) + self.encoder_flops * z.shape[0]
        yield from ctx.compute(flops, "statistics")
        self.raw[ctx.id] = raw
        return raw

    def prepare(self, ctx: DeviceContext) -> Process:
        """Statistics, then normalization (federated modes)."""
        raw = yield from self.local_statistics(ctx)
        p = self.params
        if p.normalization in ("log", "none"):
            s = normalize_statistics(raw[None, :], p.normalization)[0]
        elif p.transport == "server":
            yield ctx.send(ctx.servers[0], "moments", {"sum": torch.tensor(raw, dtype=torch.float32),
                                                       "sumsq": torch.tensor(raw**2, dtype=torch.float32)})
            if self.dynamic:
                return None  # the first round message carries the moments (``receive_model``)
            msg = yield ctx.recv("moments_reply")
            s = zscore_normalize(raw, msg.payload["mean"].double().numpy(), msg.payload["std"].double().numpy())
        else:
            mean, std = yield from self.gossip_moments(ctx, raw)
            s = zscore_normalize(raw, mean, std)
        self.stats[ctx.id] = s
        return s

    def gossip_moments(self, ctx: DeviceContext, raw: np.ndarray) -> Process:
        """Push-pull averaging of m = [s, s^2] with random neighbours; mean and std from the average."""
        m = torch.tensor(np.concatenate([raw, raw**2]), dtype=torch.float32)
        ctx.spawn(self._moment_responder(ctx, m))
        timeout = self.params.round_timeout_s if self.dynamic else None
        for t in range(self.params.moment_rounds):
            peer = select_peer(ctx.live_neighbors, ctx.rng)
            if peer is None:
                if not self.dynamic:
                    break
                continue  # nobody reachable now (dynamics): this averaging round is skipped
            sent = m.clone()
            yield ctx.send(peer, "moment_push", {"m": sent}, round=t)
            while True:
                reply = yield ctx.recv("moment_reply", timeout=timeout)
                if reply is None or (reply.src == peer and reply.round == t):
                    break
            if reply is not None:
                m += 0.5 * (reply.payload["m"] - sent)
        l = raw.shape[0]
        mean = m[:l].double().numpy()
        return mean, np.sqrt(np.clip(m[l:].double().numpy() - mean**2, 0.0, None))

    def _moment_responder(self, ctx: DeviceContext, m: torch.Tensor) -> Process:
        while True:
            msg = yield ctx.recv("moment_push")
            mine = m.clone()
            ctx.send(msg.src, "moment_reply", {"m": mine}, round=msg.round)
            m += 0.5 * (msg.payload["m"] - mine)

    # --- the processes ---------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> Process:
        if self.params.normalization == "zscore":
            p = self.params
            wait = (p.moments_timeout_s or p.round_timeout_s) if self.dynamic else None
            # under dynamics: the moments of whoever reported by the deadline
            msgs = yield from ctx.collect("moments", 0, ctx.devices, until=ctx.deadline(wait))
            got = {d: (m.payload["sum"], m.payload["sumsq"]) for d, m in msgs.items()}
            if not got:
                raise ConfigError("protocol 'conditional': no device reported its statistics by "
                                  "protocol.moments_timeout_s; raise it")
            sums = reduce(operator.add, [got[d][0].double() for d in sorted(got)])
            sumsqs = reduce(operator.add, [got[d][1].double() for d in sorted(got)])
            mean, std = population_moments(sums.numpy(), sumsqs.numpy(), len(got))
            reply = {"mean": torch.tensor(mean, dtype=torch.float32), "std": torch.tensor(std, dtype=torch.float32)}
            self._moments = reply
            if not self.dynamic:
                for d in sorted(got):
                    ctx.send(d, "moments_reply", reply)
        yield from super().server(ctx)

    def device(self, ctx: DeviceContext) -> Process:
        p = self.params
        if p.mode == "pooled":
            yield from self.pooled_device(ctx)
            return
        if p.transport == "server" and not ctx.servers:
            return  # not attached: not part of this federation
        yield from self.prepare(ctx)
        if p.transport == "gossip":
            yield from self._gossip.device(cast("DeviceContext", _ConditionedContext(ctx, self)))
        else:
            yield from super().device(ctx)

    def model_payload(self, state: State) -> dict[str, Any]:
        if self.dynamic and self._moments is not None:
            return {"state": state, **self._moments}
        return {"state": state}

    def receive_model(self, ctx: DeviceContext, model: nn.Module, payload: dict[str, Any]) -> None:
        super().receive_model(ctx, model, payload)
        if ctx.id not in self.stats and "mean" in payload:  # under dynamics: normalize with the first message
            s = zscore_normalize(self.raw[ctx.id], payload["mean"].double().numpy(), payload["std"].double().numpy())
            self.stats[ctx.id] = s
            cast(ConditionedModel, model).set_statistics(s)

    def evaluate_global(self, ctx: ServerContext, model: nn.Module, r: int) -> None:
        """Each device scores the global model with its own statistics (a measurement: s does not travel).

        Under dynamics a device that has not yet heard the moments is scored with its raw
        statistics normalized by the server's moments (a measurement, not a message)."""
        conditioned = cast(ConditionedModel, model)
        for d in self.run.device_ids:
            s = self.stats.get(d)
            if s is None and d in self.raw and self._moments is not None:
                s = zscore_normalize(self.raw[d], self._moments["mean"].double().numpy(),
                                     self._moments["std"].double().numpy())
            if s is None:
                continue  # it never computed its statistics (offline since the start)
            conditioned.set_statistics(s)
            ctx.evaluate_device(d, conditioned, r)

    def pooled_device(self, ctx: DeviceContext) -> Process:
        """Every device computes its statistics; device 0 (the data centre) trains on the pooled set."""
        self._prep[ctx.id] = ctx.spawn(self.local_statistics(ctx))
        if ctx.id != 0:
            return
        yield ctx.sleep(0)  # every device has started its statistics by now
        n = self.run.n_devices
        for i in range(n):
            yield self._prep[i]
        trainers = [i for i in range(n) if i not in self.held_out]
        norm = normalize_statistics(np.stack([self.raw[i] for i in range(n)]), self.params.normalization, trainers)
        self.stats = {i: norm[i] for i in range(n)}
        shards = ctx.pooled_shards()
        ctx.log("pooled_upload_bytes", sum(
            HEADER_BYTES + payload_bytes([shards[i].train_x, shards[i].train_y]) + 4 * self.params.components
            for i in trainers))
        model = self.make_model(ctx)
        x, y = pooled_xy(shards, trainers)
        owner = torch.cat([torch.full((shards[i].train_y.shape[0],), i, dtype=torch.int64) for i in trainers])
        table = torch.tensor(norm, dtype=torch.float32, device=x.device)
        view = _PooledView(model, x, table[owner.to(x.device)])
        idx = torch.arange(x.shape[0], device=x.device)
        for r in range(1, self.params.rounds + 1):
            result = train_local(view, idx, y, self.run.training, generator=ctx.torch_gen)
            yield from ctx.compute(train_flops(ctx.forward_flops(model), result.samples), "train")
            if self.should_eval(r):
                for d in range(n):
                    model.set_statistics(self.stats[d])
                    ctx.evaluate_device(d, model, r)
            ctx.round_done(r)

    # --- outputs ---------------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        return {**super().result(), **({"held_out": list(self.held_out)} if self.held_out else {})}

    def artifacts(self) -> dict[str, bytes]:
        rows = {str(i): {"raw": self.raw[i].tolist(), "normalized": np.asarray(self.stats[i]).tolist()}
                for i in sorted(self.stats)}
        return {"statistics.json": json.dumps(rows, indent=1).encode()} if rows else {}
