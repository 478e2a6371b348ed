"""ResNet-T-lite: a small language-conditioned visuomotor GMM policy (LIBERO's ResNet-T in spirit).

Per time step: a conv encoder with FiLM language conditioning and a spatial-softmax keypoint
projector whose keypoints the instruction also gates (agent view; a second one for the wrist
camera where the layout has it, as the paper's M = {text, agent, wrist, joint, gripper}, Sec. III-B),
linear encoders for joint and gripper states standardised by running statistics; a language token
(hashed words, mean-pooled embedding). A one-layer transformer runs over the text token and the
history's modality tokens; the last step's agent token feeds a 5-mode GMM head.

Samples travel packed in one float vector (see ``ObsLayout``) so shards stay plain tensors.
``features`` exposes each modality's encoder output for FedDRMan's subspace distillation.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn
from torch.nn import functional as F

from p2pfl.errors import ConfigError
from p2pfl.robotics.gmm import GMM, GMMHead, gmm_nll
from p2pfl.robotics.schema import PolicyOptions
from p2pfl.validation import format_validation_error

__all__ = ["ObsLayout", "tokenize", "pack_samples", "ResNetTPolicy", "MODALITIES", "VOCAB", "Packed", "resize_frames",
           "robot_policy", "policy_options"]

VOCAB = 512
#: The paper's modalities (Sec. III-B); "wrist" only where the layout has the eye-in-hand camera.
MODALITIES = ("text", "agent", "wrist", "joint", "gripper")


def tokenize(instruction: str, length: int) -> np.ndarray:
    """Hashed word ids in [1, VOCAB) (0 pads): works for any instruction, LIBERO's included."""
    words = instruction.lower().replace(",", " ").replace(".", " ").split()[:length]
    ids = [1 + zlib.crc32(w.encode()) % (VOCAB - 1) for w in words]
    return np.array(ids + [0] * (length - len(ids)), dtype=np.int64)


@dataclass(frozen=True)
class ObsLayout:
    """How one sample is packed: history x agent-view RGB image, [history x wrist RGB image,]
    history x joint, history x gripper, then instruction tokens."""

    history: int = 2
    image: int = 32
    joint: int = 3
    gripper: int = 2
    tokens: int = 16
    action: int = 4
    wrist: bool = False  # the eye-in-hand camera (LIBERO's ``eye_in_hand_rgb``) as a second image

    @property
    def frame(self) -> int:
        return 3 * self.image * self.image

    @property
    def cameras(self) -> int:
        return 2 if self.wrist else 1

    @property
    def width(self) -> int:
        return self.history * (self.cameras * self.frame + self.joint + self.gripper) + self.tokens

    def unpack(self, x: torch.Tensor) -> Packed:
        """(B, width) -> images (B, H, 3, S, S) in [0, 1] (agent, wrist or None), joint (B, H, J),
        gripper (B, H, G), tokens (B, L)."""
        b, h, s = x.shape[0], self.history, self.image
        i = h * self.frame
        img = x[:, :i].reshape(b, h, 3, s, s)
        wrist = None
        if self.wrist:
            wrist = x[:, i : i + h * self.frame].reshape(b, h, 3, s, s)
            i += h * self.frame
        j = x[:, i : i + h * self.joint].reshape(b, h, self.joint)
        i += h * self.joint
        g = x[:, i : i + h * self.gripper].reshape(b, h, self.gripper)
        i += h * self.gripper
        return Packed(img, wrist, j, g, x[:, i : i + self.tokens].round().long())


class Packed(NamedTuple):
    """One batch of samples, unpacked (see ``ObsLayout.unpack``)."""

    agent: torch.Tensor
    wrist: Optional[torch.Tensor]
    joint: torch.Tensor
    gripper: torch.Tensor
    tokens: torch.Tensor


def resize_frames(images: np.ndarray, size: int) -> np.ndarray:
    """RGB frames (T, H, W, 3) uint8 resized to (T, size, size, 3) by area averaging (the policy's input size)."""
    if images.shape[1] == size and images.shape[2] == size:
        return images
    t = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    t = F.interpolate(t, size=(size, size), mode="area")
    return t.round().clamp(0, 255).byte().permute(0, 2, 3, 1).numpy()


def pack_samples(layout: ObsLayout, images: np.ndarray, joint: np.ndarray, gripper: np.ndarray,
                 instruction: str, wrist: Optional[np.ndarray] = None) -> np.ndarray:
    """Packed samples (T, width) of one trajectory; step t sees frames t-H+1..t (first frame repeated).

    ``wrist``: the eye-in-hand images (T, S, S, 3), required exactly when ``layout.wrist``.
    """
    if layout.wrist != (wrist is not None):
        raise ValueError(f"layout.wrist={layout.wrist} but wrist images {'missing' if wrist is None else 'given'}")
    t = images.shape[0]
    h = layout.history
    idx = np.clip(np.arange(t)[:, None] + np.arange(-h + 1, 1)[None, :], 0, t - 1)  # (T, H)
    cams = [images] if wrist is None else [images, wrist]
    imgs = [c[idx].transpose(0, 1, 4, 2, 3).reshape(t, -1).astype(np.float32) / 255.0 for c in cams]
    out = np.concatenate([*imgs, joint[idx].reshape(t, -1), gripper[idx].reshape(t, -1),
                          np.broadcast_to(tokenize(instruction, layout.tokens), (t, layout.tokens)).astype(np.float32)], axis=1)
    return out.astype(np.float32)


class SpatialSoftmax(nn.Module):
    """Expected (x, y) image coordinates of each channel's softmax map (robomimic keypoints)."""

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        b, c, h, w = f.shape
        p = F.softmax(f.reshape(b, c, h * w), dim=-1).reshape(b, c, h, w)
        ys = torch.linspace(-1, 1, h, device=f.device)
        xs = torch.linspace(-1, 1, w, device=f.device)
        return torch.cat([(p.sum(2) * xs).sum(-1), (p.sum(3) * ys).sum(-1)], dim=1)


class FiLMConvEncoder(nn.Module):
    """conv(3->c, s2) - FiLM - conv(c->2c, s2) - FiLM - conv(2c->2c) - spatial softmax (image/4 px maps: 8x8 at
    32 px) - linear; ``c`` = ``channels`` (16 by default)."""

    def __init__(self, d: int, image: int, channels: int = 16) -> None:
        super().__init__()
        c = channels
        self.c1 = nn.Conv2d(3, c, 4, stride=2, padding=1)
        self.c2 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.film = nn.Linear(d, 2 * (c + 2 * c) + 4 * c)
        self.keypoints = SpatialSoftmax()
        self.proj = nn.Linear(4 * c, d)
        self.film_split = [c, c, 2 * c, 2 * c, 4 * c]  # FiLM's gains and biases of conv 1 and 2, the keypoints' gates

    def forward(self, img: torch.Tensor, lang: torch.Tensor) -> torch.Tensor:
        g1, b1, g2, b2, gk = torch.split(self.film(lang), self.film_split, dim=-1)
        x = F.relu(self.c1(img) * (1 + g1[:, :, None, None]) + b1[:, :, None, None])
        x = F.relu(self.c2(x) * (1 + g2[:, :, None, None]) + b2[:, :, None, None])
        # language gates the keypoints too: a multiplicative selection of which object to track
        return self.proj(self.keypoints(self.c3(x)) * (1 + gk))


class RunningNorm(nn.Module):
    """Standardises proprioception with running statistics (float buffers, so aggregators average them).

    Raw joint/gripper states are tiny numbers (here metres: a finger opening moves by 0.025), so
    without this a linear encoder can barely tell an open gripper from a closed one.
    """

    # buffers (register_buffer), declared for the type checker
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, n: int, momentum: float = 0.01) -> None:
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(n))
        self.register_buffer("var", torch.ones(n))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > 1:
            with torch.no_grad():
                m = max(self.momentum, 1.0 / float(self.count + 1))  # cumulative average first, then EMA
                self.mean.mul_(1 - m).add_(m * x.mean(0))
                self.var.mul_(1 - m).add_(m * x.var(0, unbiased=False))
                self.count.add_(1)
        return (x - self.mean) / self.var.clamp_min(1e-6).sqrt()


class TemporalBlock(nn.Module):
    """One pre-norm transformer block written with nn.Linear (so FLOPs and SRB see its matrices)."""

    def __init__(self, d: int, heads: int = 4, ff: int = 192) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        x = x + self.out((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.relu(self.ff1(self.n2(x))))


class ResNetTPolicy(nn.Module):
    """Language-conditioned visuomotor policy with a GMM action head (0.14 M parameters with both cameras at the
    defaults).

    ``width``: the token width d (the transformer's feed-forward is 3d wide); ``depth``: transformer blocks;
    ``channels``: the first conv layer's channels c of each image encoder (then 2c, 2c). The defaults (64, 1, 16)
    build the policy as it always was, the same weights from the same seed (``model.options`` of
    ``robot_policy``, validated by ``p2pfl.robotics.schema.PolicyOptions``).
    """

    def __init__(self, layout: ObsLayout, d: int = 64, modes: int = 5, *, depth: int = 1, channels: int = 16) -> None:
        super().__init__()
        self.layout = layout
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.text = nn.Linear(32, d)
        self.agent = FiLMConvEncoder(d, layout.image, channels)
        if layout.wrist:
            self.wrist = FiLMConvEncoder(d, layout.image, channels)
        self.joint = nn.Linear(layout.joint, d)
        self.gripper = nn.Linear(layout.gripper, d)
        self.joint_norm, self.gripper_norm = RunningNorm(layout.joint), RunningNorm(layout.gripper)
        self.pos = nn.Parameter(torch.zeros(1, 1 + self.tokens_per_step * layout.history, d))
        self.temporal = TemporalBlock(d, ff=3 * d)
        # blocks after the first (none at depth 1: the state dict and the seeded weights stay as they were)
        self.more = nn.ModuleList(TemporalBlock(d, ff=3 * d) for _ in range(depth - 1))
        self.head = GMMHead(d, layout.action, modes)

    @property
    def tokens_per_step(self) -> int:
        """Modality tokens per history step: agent, [wrist,] joint, gripper."""
        return 2 + self.layout.cameras

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(trunk output (B, d), per-modality features: text (B, d), agent/wrist/joint/gripper (B*H, d))."""
        o = self.layout.unpack(x)
        b, h = o.agent.shape[:2]
        mask = (o.tokens > 0).float()
        lang = self.text((self.embed(o.tokens) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1))
        lang_h = lang.repeat_interleave(h, 0)
        feats = {"text": lang, "agent": self.agent(o.agent.reshape(b * h, *o.agent.shape[2:]), lang_h)}
        if o.wrist is not None:
            feats["wrist"] = self.wrist(o.wrist.reshape(b * h, *o.wrist.shape[2:]), lang_h)
        feats["joint"] = self.joint(self.joint_norm(o.joint.reshape(b * h, -1)))
        feats["gripper"] = self.gripper(self.gripper_norm(o.gripper.reshape(b * h, -1)))
        m = self.tokens_per_step
        steps = torch.stack([feats[k] for k in MODALITIES[1:] if k in feats], 1).reshape(b, m * h, -1)
        z = self.temporal(torch.cat([lang[:, None], steps], 1) + self.pos)
        for block in self.more:
            z = block(z)
        return z[:, -m], feats

    def distribution(self, x: torch.Tensor) -> GMM:
        return self.head(self.encode(x)[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Deterministic action (mean of the most likely mode); the kernel's FLOP counter calls this."""
        return self.distribution(x).mode()

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: GMM negative log-likelihood of the expert actions (Eq. 4)."""
        return gmm_nll(self.distribution(x), y)

    def srb_eligible(self, name: str, value: torch.Tensor) -> bool:
        """2-D linear weight matrices (projector, encoders, transformer, head): SRB's blocks (Sec. III-C2)."""
        return value.ndim == 2 and name.endswith(".weight") and not name.startswith("embed") and min(value.shape) > 1


def robot_policy(input_shape: tuple[int, ...], num_classes: int, *, hint: object = None, **options: object) -> ResNetTPolicy:
    """The ``robot_policy`` model (a plug-in model, ``p2pfl.plugins``): the policy for the robot data's
    observation layout (``hint``, the robot federation's ``model_hint``); ``options`` (``model.options``):
    ``width``, ``depth`` and ``channels`` (``p2pfl.robotics.schema.PolicyOptions``)."""
    if not isinstance(hint, ObsLayout):
        raise ConfigError("model.name 'robot_policy' needs robot data (data.dataset: robotics)")
    o = policy_options(options)
    return ResNetTPolicy(hint, o.width, depth=o.depth, channels=o.channels)


def policy_options(options: Mapping[str, object]) -> PolicyOptions:
    """``model.options`` of ``robot_policy`` validated; a one-line ``ConfigError`` naming the first bad one."""
    try:
        return PolicyOptions.model_validate(dict(options))
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "robot_policy", "model.options", dict(options))) from None


def _check_options(options: Mapping[str, object]) -> None:
    """``ModelSpec``'s load-time check of ``model.options`` (ValueError, one line)."""
    try:
        policy_options(options)
    except ConfigError as err:
        raise ValueError(str(err)) from None


robot_policy.check_options = _check_options  # type: ignore[attr-defined]
