"""Study files: one-line errors, expansion order, cell ids, and cells equal to the command line they stand for."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from p2pfl.config import load
from p2pfl.config.loader import parse_override
from p2pfl.errors import ConfigError, UserError
from p2pfl.study.spec import MAX_CELLS, cell_id, load_study, override_text
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")


def _base() -> dict:
    return digits_scenario({"name": "gossip", "rounds": 2, "mode": "sync", "exchange": "push_pull"}, n=4)


FEDAVG = {"unset": ["protocol.mode", "protocol.exchange"],
          "set": {"protocol.name": "fedavg", "topology.servers": [{"attach": "all"}]}}


def _study(tmp_path: Path, **fields) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_base()))
    data = {"name": "s", "base": "base.yaml", "seeds": [0], **fields}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


ERRORS = {
    "unknown key": ({"grids": {"training.lr": [0.1]}}, r"study\.yaml: unknown field 'grids'; remove it"),
    "unknown variant key": ({"variants": {"a": {"sett": {}}}}, r"unknown field 'variants\.a\.sett'"),
    "grid value not a list": ({"grid": {"training.lr": 0.1}}, r"field 'grid\.training\.lr': .*valid list; got 0\.1"),
    "grid value repeated": ({"grid": {"training.lr": [0.1, 0.1]}}, r"field 'grid\.training\.lr': values must differ"),
    "grid key not dotted": ({"grid": {"training..lr": [0.1]}}, r"field 'grid\.training\.\.lr': expected a dotted key"),
    "zip lengths differ": ({"zip": {"training.lr": [0.1, 0.2], "protocol.rounds": [1]}},
                           r"field 'zip': .*same length; got lengths training\.lr: 2, protocol\.rounds: 1"),
    "zip key also in grid": ({"grid": {"training.lr": [0.1]}, "zip": {"training.lr": [0.2]}},
                             r"field 'zip': key 'training\.lr' is also in 'grid'"),
    "zip position repeated": ({"zip": {"training.lr": [0.1, 0.2, 0.1], "protocol.rounds": [1, 1, 1]}},
                              r"field 'zip': positions must differ; position 2 repeats position 0"),
    "empty seeds": ({"seeds": []}, r"field 'seeds': .*at least 1 item"),
    "empty seed range": ({"seeds": {"start": 2, "stop": 2}}, r"field 'seeds': 'stop' must be greater than 'start'"),
    "negative seed": ({"seeds": [-1]}, r"field 'seeds\[0\]': .*greater than or equal to 0"),
    "bad variant name": ({"variants": {"my variant": {}}}, r"field 'variants\.my variant': expected a name"),
    "base not found": ({"base": "nope.yaml"}, r"field 'base': scenario file 'nope\.yaml' not found"),
    "invalid cell (grid)": ({"grid": {"training.lr": [0.1, "fast"]}},
                            r"study\.yaml: cell 'training\.lr=fast__seed0': .*base\.yaml: field 'training\.lr': .*got 'fast'"),
    "invalid cell (variant)": ({"variants": {"gossip": {}, "fedavg": {"set": {"protocol.name": "fedavg"}}}},
                               r"cell 'fedavg__seed0': .*protocol 'fedavg' has no parameters .*left over from protocol 'gossip'.*"
                               r"variant's or the study's 'unset'"),
    "unset of a missing key": ({"variants": {"a": {"unset": ["protocol.beta"]}}},
                               r"cell 'a__seed0': .*--unset protocol\.beta: the scenario has no key"),
    "ids collide": ({"grid": {"training.lr": [0.1, "0.1"]}}, r"two cells get the same id"),
    "exclude key unknown": ({"grid": {"training.lr": [0.1]}, "exclude": [{"training.epochs": 1}]},
                            r"field 'exclude': .*entry 0: key 'training\.epochs' is not 'variant' or a grid or zip key"),
    "exclude value unknown": ({"grid": {"training.lr": [0.1, 0.2]}, "exclude": [{"training.lr": 0.3}]},
                              r"field 'exclude': .*entry 0: training\.lr 0\.3 is not one of the study's values \[0\.1, 0\.2\]"),
    "exclude empty entry": ({"grid": {"training.lr": [0.1]}, "exclude": [{}]}, r"field 'exclude': .*entry 0 is empty"),
    "exclude everything": ({"grid": {"training.lr": [0.1]}, "exclude": [{"training.lr": 0.1}]},
                           r"field 'exclude' drops every cell"),
    "exclude across zip positions": ({"zip": {"training.lr": [0.1, 0.2], "protocol.rounds": [1, 2]},
                                      "exclude": [{"training.lr": 0.1, "protocol.rounds": 2}]},
                                     r"field 'exclude': entry 0 .*matches no cell"),
    "too many cells": ({"seeds": {"start": 0, "stop": MAX_CELLS + 1}}, r"expands to 10,001 cells, more than 10,000"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_a_bad_study_is_one_line_naming_the_file_and_the_field(tmp_path, case):
    fields, pattern = ERRORS[case]
    path = _study(tmp_path, **fields)
    with pytest.raises(ConfigError) as info:
        load_study(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert re.search(pattern, message), message


def test_a_grid_value_json_cannot_hold_is_refused(tmp_path):
    path = _study(tmp_path)
    path.write_text(path.read_text() + "grid: {training.lr: [2024-01-01]}\n")  # YAML reads a date
    with pytest.raises(ConfigError, match=r"field 'grid\.training\.lr': each value must be null, .*got "
                                          r"datetime\.date\(2024, 1, 1\) \(date\); quote it"):
        load_study(path)


def test_an_empty_or_non_mapping_study_file_is_refused(tmp_path):
    (tmp_path / "e.yaml").write_text("# nothing\n")
    with pytest.raises(ConfigError, match=r"e\.yaml: the file is empty.*a study needs 'base'"):
        load_study(tmp_path / "e.yaml")
    (tmp_path / "l.yaml").write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match=r"l\.yaml: expected a mapping of study fields"):
        load_study(tmp_path / "l.yaml")


def test_cells_are_variants_x_grid_x_zip_x_seeds_in_order(tmp_path):
    path = _study(tmp_path, variants={"gossip": {}, "fedavg": FEDAVG},
                  grid={"training.lr": [0.02, 0.05], "training.batch_size": [8, 16]},
                  zip={"data.samples_per_client": [30, 40], "training.epochs": [1, 2]},
                  seeds={"start": 3, "stop": 5})
    study = load_study(path)
    assert len(study.cells) == 2 * 4 * 2 * 2
    first = study.cells[0]
    assert first.id == "gossip__training.lr=0.02__training.batch_size=8__data.samples_per_client=30__training.epochs=1__seed3"
    assert [c.seed for c in study.cells[:4]] == [3, 4, 3, 4]  # seeds vary fastest, then zip
    assert [c.grid["data.samples_per_client"] for c in study.cells[:4]] == [30, 30, 40, 40]
    assert [c.grid["training.batch_size"] for c in study.cells[:8:4]] == [8, 16]  # then the last grid key
    assert {c.variant for c in study.cells[:16]} == {"gossip"} and study.cells[16].variant == "fedavg"
    assert len({c.id for c in study.cells}) == len(study.cells)
    assert all(SAFE_ID.fullmatch(c.id) for c in study.cells)
    assert first.record("s") == {"study": "s", "cell": first.id, "variant": "gossip",
                                 "grid": {"training.lr": 0.02, "training.batch_size": 8,
                                          "data.samples_per_client": 30, "training.epochs": 1}, "seed": 3}
    assert load_study(path).cells == study.cells  # deterministic


def test_order_seeds_runs_every_cell_of_a_seed_before_the_next_seed(tmp_path):
    fields = {"variants": {"gossip": {}, "fedavg": FEDAVG}, "grid": {"training.lr": [0.02, 0.05]}, "seeds": [0, 1]}
    by_variant = load_study(_study(tmp_path, **fields)).cells
    by_seed = load_study(_study(tmp_path, **fields, order="seeds")).cells
    assert [c.seed for c in by_seed] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [c.id for c in by_seed[:4]] == [c.id for c in by_variant if c.seed == 0]  # variants, grid as before
    assert sorted(by_seed, key=lambda c: c.id) == sorted(by_variant, key=lambda c: c.id)  # the same cells
    with pytest.raises(ConfigError, match=r"field 'order'"):
        load_study(_study(tmp_path, **fields, order="random"))


def test_exclude_drops_exactly_the_matching_cells_and_keeps_the_others_as_they_were(tmp_path):
    fields = {"variants": {"gossip": {}, "fedavg": FEDAVG},
              "zip": {"training.lr": [0.02, 0.05, 0.05], "training.epochs": [1, 1, 2]}, "seeds": [0, 1]}
    full = load_study(_study(tmp_path, **fields))
    cut = load_study(_study(tmp_path, **fields, exclude=[{"variant": "fedavg", "training.epochs": 2},
                                                         {"variant": "gossip", "training.lr": 0.02}]))
    dropped = {c.id for c in full.cells} - {c.id for c in cut.cells}
    assert dropped == {"fedavg__training.lr=0.05__training.epochs=2__seed0", "fedavg__training.lr=0.05__training.epochs=2__seed1",
                       "gossip__training.lr=0.02__training.epochs=1__seed0", "gossip__training.lr=0.02__training.epochs=1__seed1"}
    assert cut.cells == tuple(c for c in full.cells if c.id not in dropped)  # same order, ids and scenarios


def test_without_variants_the_id_has_no_variant_part(tmp_path):
    study = load_study(_study(tmp_path, grid={"protocol.rounds": [1, 2]}, seeds=[0, 7]))
    assert [c.id for c in study.cells] == ["protocol.rounds=1__seed0", "protocol.rounds=1__seed7",
                                           "protocol.rounds=2__seed0", "protocol.rounds=2__seed7"]
    assert study.cells[0].variant is None and study.name == "s"


def test_ids_of_non_plain_values_are_slug_and_hash(tmp_path):
    a = cell_id(None, {"data.partition": {"kind": "dirichlet", "alpha": 0.1}}, 0)
    b = cell_id(None, {"data.partition": {"kind": "dirichlet", "alpha": 0.5}}, 0)
    assert a.startswith("data.partition=kind-dirichlet-alpha-0.1-") and a != b
    assert cell_id(None, {"data.partition": {"kind": "dirichlet", "alpha": 0.1}}, 0) == a  # stable
    digest = hashlib.sha1(json.dumps("a b/c").encode()).hexdigest()[:8]
    assert cell_id("v", {"x.y": "a b/c", "z": None, "w": True, "f": 1e-05}, 2) == \
        f"v__x.y=a-b-c-{digest}__z=null__w=true__f=1e-05__seed2"
    long = cell_id(None, {f"k{i}": "x" * 30 for i in range(10)}, 0)
    assert len(long) <= 200 and SAFE_ID.fullmatch(long)


@pytest.mark.parametrize("value", [0.01, 5, True, None, "gossip", "yes", "", "a=b", [{"attach": "all"}],
                                   {"kind": "dirichlet", "alpha": 0.1}, "1e3", "~"])
def test_override_text_round_trips_through_the_set_parser(value):
    key, parsed = parse_override(override_text("a.b", value))
    assert key == "a.b" and parsed == value and type(parsed) is type(value)


def test_a_cell_is_the_command_line_it_stands_for(tmp_path):
    path = _study(tmp_path, set={"protocol.rounds": 3}, variants={"gossip": {}, "fedavg": FEDAVG},
                  grid={"training.lr": [0.02]}, seeds=[4])
    fedavg = load_study(path).cells[1]
    assert fedavg.flags == ("--unset protocol.mode", "--unset protocol.exchange", "--set protocol.name=fedavg",
                            "--set topology.servers=[{attach: all}]", "--set training.lr=0.02", "--seed 4")
    same = load(tmp_path / "base.yaml", unset=["protocol.mode", "protocol.exchange"], seed=4,
                overrides=["protocol.rounds=3", "protocol.name=fedavg", "topology.servers=[{attach: all}]",
                           "training.lr=0.02"])
    assert fedavg.scenario == same and fedavg.scenario.protocol.rounds == 3


def test_null_removes_a_key_and_an_inline_base_works(tmp_path):
    base = _base()
    base["protocol"]["reply_timeout_s"] = 1.0
    study = load_study({"name": "inline", "base": base, "seeds": [0],
                        "variants": {"plain": {"set": {"protocol.reply_timeout_s": None}}}})
    assert study.cells[0].scenario.protocol.reply_timeout_s is None and study.base == "(inline)"
    with pytest.raises(ConfigError, match=r"^study: cell 'seed0': field 'protocol\.rounds'"):
        load_study({"base": {**base, "protocol": {"name": "gossip", "rounds": 0}}, "seeds": [0]})


def test_the_base_is_found_next_to_the_study_then_in_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_base()))
    study = tmp_path / "sub" / "st.yaml"
    study.write_text(yaml.safe_dump({"base": "base.yaml", "seeds": [0]}))
    monkeypatch.chdir(tmp_path)
    assert load_study(study).name == "st"  # default name: the file's
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(UserError, match="not found"):
        load_study(study)


def test_the_tour_study_has_twelve_valid_cells():
    study = load_study(ROOT / "scenarios" / "studies" / "tour.yaml")
    assert study.name == "tour" and len(study.cells) == 12
    assert {c.variant for c in study.cells} == {"gossip", "fedavg"}
    assert {c.scenario.protocol.name for c in study.cells} == {"gossip", "fedavg"}


def test_a_zip_key_may_repeat_values_where_another_key_tells_the_positions_apart(tmp_path):
    path = _study(tmp_path, zip={"data.samples_per_client": [30, 40, 40], "training.epochs": [1, 1, 2]}, seeds=[0])
    study = load_study(path)
    assert [(c.grid["data.samples_per_client"], c.grid["training.epochs"]) for c in study.cells] == [(30, 1), (40, 1),
                                                                                                     (40, 2)]
    assert len({c.id for c in study.cells}) == 3


def test_a_variant_may_name_its_own_base_scenario(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("extends: base.yaml\nprotocol: {name: fedavg, mode: ~, exchange: ~}\n"
                     "topology: {servers: [{attach: all}]}\n")
    path = _study(tmp_path, variants={"gossip": {}, "fedavg": {"base": "other.yaml"}}, seeds=[0])
    study = load_study(path)
    by = {c.variant: c for c in study.cells}
    assert by["gossip"].scenario.protocol.name == "gossip" and by["fedavg"].scenario.protocol.name == "fedavg"
    assert by["fedavg"].flags[0] == f"(base {other})"
    with pytest.raises(ConfigError, match=r"variants\.fedavg: field 'base': scenario file 'nope\.yaml' not found"):
        load_study(_study(tmp_path, variants={"fedavg": {"base": "nope.yaml"}}, seeds=[0]))
