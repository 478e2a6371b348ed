"""Robotics' YAML: the ``robotics`` dataset and the ``robot_suites`` partition kind, registered as plug-ins.

``p2pfl.plugins.BUILTIN`` names them (``p2pfl.datasets``: ``robotics``, ``p2pfl.partitions``:
``robot_suites``), as a distribution's entry points would. This module is light (pydantic, no torch,
no MuJoCo): validating a robot scenario imports it and nothing else of robotics; a run that builds
the shards imports the partition's ``builder``, ``p2pfl.robotics.federation``.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from p2pfl.data.datasets import DatasetInfo
from p2pfl.data.schema import DataSpec, PluginPartition
from p2pfl.validation import Strict

__all__ = ["ROBOTICS", "RobotSuitesPartition", "SUITE_NAMES", "LIBERO_HORIZONS", "PolicyOptions", "CAMERA_PX"]

#: The ``robotics`` dataset: packed observations (``p2pfl.robotics.policy.ObsLayout``, 6170 wide for the
#: default layout) and expert actions, built by its partition kind; ``model: auto`` is the robot policy.
ROBOTICS = DatasetInfo("robot manipulation demos (MuJoCo suites spatial/object/goal by scripted experts, or LIBERO "
                       "hdf5); partition robot_suites", 0, (6170,), model="robot_policy",
                       partitions=("robot_suites",))

#: The generated MuJoCo task suites (``p2pfl.robotics.suites.SUITES``).
SUITE_NAMES = ("spatial", "object", "goal")
#: LIBERO's suites (``source: libero``) and the control steps an episode gets in the usual LIBERO
#: evaluation (OpenVLA's ``max_steps``, sized to the longest human demonstration of each suite).
LIBERO_HORIZONS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520,
                   "libero_90": 400}
#: The px of LIBERO's camera renders (demos and rollouts); the policy sees them resized to ``image_px``.
CAMERA_PX = 128


class PolicyOptions(Strict):
    """``model.options`` of ``robot_policy`` (``p2pfl.robotics.policy.ResNetTPolicy``); the defaults build the
    0.14 M-parameter policy (both cameras) as it always was. Parameters grow about as width^2 x depth (the
    transformer) and channels^2 (the image encoders)."""

    width: int = Field(64, ge=16, le=1024, multiple_of=4,
                       description="token width d of every modality encoder and the transformer (its feed-forward "
                                   "3d wide; a multiple of its 4 attention heads)")
    depth: int = Field(1, ge=1, le=8, description="transformer blocks over the text and modality tokens")
    channels: int = Field(16, ge=4, le=256, description="channels c of each image encoder's first conv layer (then "
                                                        "2c and 2c; 2c spatial-softmax keypoints)")


class RobotSuitesPartition(PluginPartition):
    """Robot devices over task suites: Dirichlet(alpha) task skew within a suite (FedDRMan Sec. IV-1).

    Each suite's demos are split among ``reference_clients`` clients by Dirichlet(alpha) over
    tasks; the first ``clients_per_suite`` of them join the federation (the paper reuses shards
    of the 5-client partition for cross-suite runs). Device i belongs to suite i // clients_per_suite.
    """

    datasets: ClassVar[tuple[str, ...] | None] = ("robotics",)
    builder: ClassVar[str] = "p2pfl.robotics.federation:build_robot_federation"

    kind: Literal["robot_suites"]
    suites: list[str] = Field(default_factory=lambda: ["object"], min_length=1)
    clients_per_suite: int = Field(5, ge=1)
    reference_clients: int = Field(5, ge=1)
    alpha: float = Field(0.5, gt=0)
    demos_per_task: int = Field(150, ge=2, description="20 are too few to localise objects on unseen layouts")
    history: int = Field(1, ge=1, le=8, description="observation steps per sample; 1 by default: with 2, the proprio history reveals the last action and BC learns to copy it (the copycat problem: spatial 10% with 2 steps, 57.5% with 1, same training)")
    eval_episodes: int = Field(10, ge=1, description="rollouts per task at every evaluation (the paper: 10 for "
                                                    "checkpoint selection, 20 for the final number)")
    best_of_last: int = Field(1, ge=1, description="summary's success_best_of_last_k: the best mean success of the "
                                                   "last k evaluations (the paper's best of 10 checkpoints), beside "
                                                   "success_last_round")
    binarize_gripper: bool | None = Field(None, description="the policy's gripper command (last action dim) set to "
                                                           "+1 if > 0 else -1 at rollout, as LIBERO's policies act; "
                                                           "default: on for source libero, off for generated")
    horizon: int = Field(80, ge=1, description="control steps per episode (generated suites, and suites not in horizons)")
    horizons: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict,
                                     description="control steps per episode by suite; source libero fills in "
                                                 "LIBERO's own (libero_object 280, ...) for suites not given")
    source: Literal["generated", "libero"] = "generated"
    libero_tasks: dict[str, list[str]] = Field(default_factory=dict,
                                               description="libero source: suite -> demo files (relative to data.root)")
    wrist: bool = Field(False, description="the eye-in-hand camera as a second image modality (the paper's wrist "
                                           "RGB; libero source: the demos' obs/eye_in_hand_rgb)")
    image_px: int = Field(32, ge=8, le=CAMERA_PX,
                          description="the policy's image size: the cameras' renders (libero source: 128 px) resized "
                                      "to image_px by area averaging, in training and rollouts alike; other than 32 "
                                      "needs source: libero (the generated suites render 32 px)")
    joint_noise: float = Field(0.0, ge=0.0, le=0.2,
                               description="libero source: the std (rad) of the noise on the arm's starting joints "
                                           "the demo files were recorded with (libero_demos --joint-noise; LIBERO's "
                                           "fixed initial states, where rollouts start, carry about 0.02); checked "
                                           "against each file's joint_noise (absent: 0)")
    val_demos_per_task: int = Field(0, ge=0, le=1000,
                                    description="libero source: the demos of each task file after its first "
                                                "demos_per_task held out as validation samples (never trained on, "
                                                "never scored; protocol.checkpoint: best_val_nll of centralized "
                                                "selects by them); the files must hold that many more")
    render_lod: float = Field(0.0, ge=0.0, le=0.01,
                              description="libero source: rollouts draw the visual meshes simplified within this "
                                          "many metres (p2pfl.robotics.lod; 0: LIBERO's meshes whole); the demo "
                                          "files must be recorded with the same value (libero_demos --lod)")

    @field_validator("suites")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"suites must be distinct; got {v}")
        return v

    @model_validator(mode="after")
    def _suites_of_source(self) -> RobotSuitesPartition:
        known = SUITE_NAMES if self.source == "generated" else tuple(LIBERO_HORIZONS)
        bad = [s for s in self.suites if s not in known]
        if bad:
            raise ValueError(f"suites: {bad[0]!r} is not a {self.source} suite; valid: {', '.join(known)}")
        extra = sorted(set(self.libero_tasks) - set(self.suites)) + sorted(set(self.horizons) - set(self.suites))
        if extra:
            raise ValueError(f"{extra[0]!r} is not one of the suites {self.suites}")
        if self.render_lod > 0 and self.source != "libero":
            raise ValueError("render_lod needs source: libero (the generated suites' meshes are simple already)")
        if self.wrist and self.source != "libero":
            raise ValueError("wrist: true needs source: libero (the generated suites render the agent view only)")
        if self.image_px != 32 and self.source != "libero":
            raise ValueError(f"image_px: {self.image_px} needs source: libero (the generated suites' demos are "
                             "rendered at 32 px); remove it")
        if self.joint_noise > 0 and self.source != "libero":
            raise ValueError("joint_noise needs source: libero (it names how LIBERO demo files were recorded)")
        if self.val_demos_per_task and self.source != "libero":
            raise ValueError("val_demos_per_task needs source: libero (demos read from files); remove it")
        if self.source == "libero":
            object.__setattr__(self, "horizons", {s: self.horizons.get(s, LIBERO_HORIZONS[s]) for s in self.suites})
        if self.binarize_gripper is None:
            object.__setattr__(self, "binarize_gripper", self.source == "libero")
        return self

    @property
    def n_clusters(self) -> int:
        return len(self.suites)

    def check(self, data: DataSpec) -> None:
        if data.test_samples_per_client is not None:
            raise ValueError("test_samples_per_client does not apply to robot_suites (episodes are split by "
                             "test_fraction); remove it")
