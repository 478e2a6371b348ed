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


def test_a_rerun_reads_every_kept_rollout_and_a_partial_folder_is_completed_to_the_same_bytes(tmp_path, monkeypatch):
    sc = {**_scenario(tmp_path / "data", {"name": "fedavg", "rounds": 2}), "executor": "inline"}
    plain = p2pfl.run(sc, out=tmp_path / "plain")
    kept = tmp_path / "kept"
    first = p2pfl.run(sc, out=tmp_path / "first", evaluations=kept)
    files = sorted(kept.glob("*-t1.json"))
    assert len(files) == first.timing["evaluations_kept"] >= 2 and first.timing["evaluations_read"] == 0
    assert "evaluations_kept" not in plain.timing and _files(first) == _files(plain)

    files[0].unlink()  # a run cut off before its last rollout: the others are read, that one runs again
    partial = p2pfl.run(sc, out=tmp_path / "partial", evaluations=kept)
    assert (partial.timing["evaluations_read"], partial.timing["evaluations_kept"]) == (len(files) - 1, 1)
    assert files[0].is_file() and _files(partial) == _files(plain)

    monkeypatch.setattr(RobotFederation, "rollout_call", lambda self, model, suite: (_no_rollout, ()))
    resumed = p2pfl.run(sc, out=tmp_path / "resumed", evaluations=kept)
    assert (resumed.timing["evaluations_read"], resumed.timing["evaluations_kept"]) == (len(files), 0)
    assert _files(resumed) == _files(plain)


def test_a_run_cut_off_after_its_first_evaluation_leaves_it_kept_and_the_rerun_completes_the_bytes(tmp_path):
    raw = _scenario(tmp_path / "data", {"name": "fedavg", "rounds": 3, "eval_every": 1})
    sc = {**raw, "executor": "inline"}
    plain = p2pfl.run(sc, out=tmp_path / "plain")
    kept, rounds = tmp_path / "kept", []

    def cut_off() -> None:  # a session ending after round 1 (its evaluation done): the server's rounds count
        rounds.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        p2pfl.run(sc, out=tmp_path / "cut", on_round=cut_off, evaluations=kept)
    assert rounds == [1] and not (tmp_path / "cut").exists()
    assert len(list(kept.iterdir())) == 2  # round 1's global model on each of the 2 suites
    again = p2pfl.run(sc, out=tmp_path / "again", evaluations=kept)
    assert (again.timing["evaluations_read"], again.timing["evaluations_kept"]) == (2, 4)
    assert _files(again) == _files(plain)


def test_another_seed_or_episode_count_keeps_results_of_its_own(tmp_path):
    sc = {**_scenario(tmp_path / "data", {"name": "local", "rounds": 1}), "executor": "inline"}
    kept = tmp_path / "kept"
    p2pfl.run(sc, write=False, evaluations=kept)
    names = set(kept.iterdir())
    other = p2pfl.run({**sc, "seed": 1}, write=False, evaluations=kept)
    new = set(kept.iterdir()) - names
    assert other.timing["evaluations_read"] == 0 and len(new) == other.timing["evaluations_kept"] > 0
    sc["data"]["partition"]["eval_episodes"] = 2
    assert p2pfl.run(sc, write=False, evaluations=kept).timing["evaluations_read"] == 0


@pytest.mark.parametrize("content", [b"not json", b'{"per_task": {}, "steps": -1, "reach": {}, "grasp": {}}',
                                     b"[]", b" " * (1 << 20 | 1)])
def test_a_file_that_is_not_a_kept_result_is_one_line_naming_it(tmp_path, content):
    sc = {**_scenario(tmp_path / "data", {"name": "local", "rounds": 1}), "executor": "inline"}
    kept = tmp_path / "kept"
    p2pfl.run(sc, write=False, evaluations=kept)
    bad = sorted(kept.iterdir())[0]
    bad.write_bytes(content)
    with pytest.raises(UserError, match=r"not a kept evaluation result .*remove it and the job runs again") as err:
        p2pfl.run(sc, out=tmp_path / "out", evaluations=kept)
    assert str(bad) in str(err.value) and "\n" not in str(err.value) and not (tmp_path / "out").exists()
