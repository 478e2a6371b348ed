"""Kept evaluation results: a robot run's rollouts, read back from its evaluation folder, give the same bytes."""

from __future__ import annotations

import pytest

import p2pfl
from p2pfl.errors import UserError
from p2pfl.robotics.federation import RobotFederation

from .conftest import needs_mujoco
from .test_federation import _scenario

pytestmark = [pytest.mark.robotics, pytest.mark.slow, needs_mujoco]


def _no_rollout(*_: object) -> None:
    raise AssertionError("a rollout ran although its result was kept")


def _files(run) -> dict[str, bytes]:
    return {name: (run.out / name).read_bytes() for name in ("summary.json", "events.jsonl")}


def test_a_run_cut_off_keeps_its_rollouts_and_reruns_read_them_to_the_same_bytes(tmp_path, monkeypatch):
    sc = {**_scenario(tmp_path / "data", {"name": "fedavg", "rounds": 2, "eval_every": 1}), "executor": "inline"}
    plain = p2pfl.run(sc, out=tmp_path / "plain")
    assert "evaluations_kept" not in plain.timing
    kept, rounds = tmp_path / "kept", []

    def cut_off() -> None:  # a session that ends after round 1 (its evaluation done): the server's rounds count
        rounds.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        p2pfl.run(sc, out=tmp_path / "cut", on_round=cut_off, evaluations=kept)
    assert rounds == [1] and not (tmp_path / "cut").exists()
    assert len(list(kept.glob("*-t1.json"))) == 2  # round 1's global model on each of the 2 suites

    again = p2pfl.run(sc, out=tmp_path / "again", evaluations=kept)  # some kept: read; the rest run and kept
    assert (again.timing["evaluations_read"], again.timing["evaluations_kept"]) == (2, 2)
    assert _files(again) == _files(plain)

    monkeypatch.setattr(RobotFederation, "rollout_call", lambda self, model, suite: (_no_rollout, ()))
    resumed = p2pfl.run(sc, out=tmp_path / "resumed", evaluations=kept)  # all kept: no rollout runs
    assert (resumed.timing["evaluations_read"], resumed.timing["evaluations_kept"]) == (4, 0)
    assert _files(resumed) == _files(plain)


def test_another_seed_or_episode_count_keeps_results_of_its_own_and_a_bad_file_is_one_line(tmp_path):
    sc = {**_scenario(tmp_path / "data", {"name": "local", "rounds": 1}), "executor": "inline"}
    kept = tmp_path / "kept"
    p2pfl.run(sc, write=False, evaluations=kept)
    names = set(kept.iterdir())
    other = p2pfl.run({**sc, "seed": 1}, write=False, evaluations=kept)
    new = set(kept.iterdir()) - names
    assert other.timing["evaluations_read"] == 0 and len(new) == other.timing["evaluations_kept"] > 0
    sc["data"]["partition"]["eval_episodes"] = 2
    assert p2pfl.run(sc, write=False, evaluations=kept).timing["evaluations_read"] == 0

    bad = sorted(names)[0]
    for content in (b"not json", b'{"per_task": {}, "steps": -1, "reach": {}, "grasp": {}}', b"[]",
                    b" " * (1 << 20 | 1)):  # not JSON, a negative step count, not an object, over the size
        bad.write_bytes(content)
        with pytest.raises(UserError, match=r"not a kept evaluation result .*remove it and the job runs again") as e:
            p2pfl.run({**sc, "seed": 0}, out=tmp_path / "out", evaluations=kept, overrides=[
                "data.partition.eval_episodes=1"])
        assert str(bad) in str(e.value) and "\n" not in str(e.value) and not (tmp_path / "out").exists()
