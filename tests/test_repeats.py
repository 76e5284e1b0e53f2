"""A run holds each test once, under the id its parameters make: the run reader of report, compare and
spread refuses a test id met twice, and the ids pytest numbers when a parameter was named twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT
from ampbench.results import DistributedRecord, Record, RunError, SpeedRecord, load_run
from tests import records

DATA = Path(__file__).parent / "data"


def _speed(model: str, mode: str, speedup: float = 2.0) -> SpeedRecord:
    return records.speed(model=model, mode=mode, device="cpu", speedup=speedup, speedup_low=0.9 * speedup,
                       speedup_high=1.1 * speedup, rounds=8, confidence=0.99)


def _run(path: Path, cells: list[tuple[str, Record]]) -> Path:
    benchmarks = [{"name": name, "extra_info": cell.to_info()} for name, cell in cells]
    path.write_text(json.dumps({"machine_info": {"ampbench": {"device": "cpu"}}, "benchmarks": benchmarks}))
    return path


def test_a_test_id_met_twice_is_refused_naming_the_file_and_the_id(tmp_path, capsys):
    path = _run(tmp_path / "twice.json", [("test_speed[mlp-fp32]", _speed("mlp", "fp32", 1.0)),
                                          ("test_speed[mlp-amp_bf16]", _speed("mlp", "amp_bf16", 2.0)),
                                          ("test_speed[mlp-amp_bf16]", _speed("mlp", "amp_bf16", 3.0))])
    with pytest.raises(RunError, match=r"twice\.json: benchmarks\[2\] repeats the test id "
                                       r"test_speed\[mlp-amp_bf16\] of benchmarks\[1\]"):
        load_run(path)
    good = _run(tmp_path / "good.json", [("test_speed[mlp-amp_bf16]", _speed("mlp", "amp_bf16"))])
    for argv in (["report", str(path), "-o", str(tmp_path / "r")], ["compare", str(good), str(path)],
                 ["report", str(good), "--compare", str(path), "-o", str(tmp_path / "r")]):
        assert main(argv) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.startswith("ampbench: error: ") and str(path) in err and "test_speed[mlp-amp_bf16]" in err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# the id a cell's parameters make, and the two pytest 8 and 9 make of it when a parameter set comes twice: a
# counter, after "_" where the id ends in a digit
NUMBERED = [
    ("mlp-amp_bf16", "mlp-amp_bf16_0", "mlp-amp_bf16_1", _speed("mlp", "amp_bf16")),
    ("gpt-fp8_tensorwise", "gpt-fp8_tensorwise0", "gpt-fp8_tensorwise1", _speed("gpt", "fp8_tensorwise")),
    ("gpt-amp_bf16-compiled", "gpt-amp_bf16-compiled0", "gpt-amp_bf16-compiled1", _speed("gpt", "amp_bf16 compiled")),
    ("mlp-amp_bf16-bf16_hook", "mlp-amp_bf16-bf16_hook0", "mlp-amp_bf16-bf16_hook1",
     records.distributed(model="mlp", mode="amp_bf16", device="cpu", comm="bf16_hook", world_size=2, speedup=1.5,
                       speedup_low=1.4, speedup_high=1.6, rounds=8, confidence=0.99)),
]


@pytest.mark.parametrize("plain, first, second, cell", NUMBERED, ids=[n[0] for n in NUMBERED])
def test_ids_pytest_numbered_for_a_repeated_parameter_are_refused(tmp_path, capsys, plain, first, second, cell):
    test = "test_ddp_speed" if isinstance(cell, DistributedRecord) else "test_speed"
    first, second = f"{test}[{first}]", f"{test}[{second}]"
    path = _run(tmp_path / "numbered.json", [(first, cell), (second, cell)])
    with pytest.raises(RunError) as info:
        load_run(path)
    message = str(info.value)
    assert message.startswith(f"{path}: test ids {first}, {second} end in the counter pytest adds")
    assert "--perf-models mlp,mlp" in message
    # compare would otherwise call the old run's test missing and both of these new
    old = _run(tmp_path / "old.json", [(f"{test}[{plain}]", cell)])
    assert main(["compare", str(old), str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert first in err and second in err and "missing" not in err


def test_ids_whose_own_parameters_end_in_digits_are_read(tmp_path):
    """A model name ending in a number, and modes ending in digits, are the ids' own."""
    cells = [("test_speed[wide_resnet28_10-fp32]", _speed("wide_resnet28_10", "fp32")),
             ("test_speed[wide_resnet28_10-amp_bf16]", _speed("wide_resnet28_10", "amp_bf16")),
             ("test_speed[resnet50-bf16]", _speed("resnet50", "bf16"))]
    run = load_run(_run(tmp_path / "run.json", cells))
    assert [c.test_id for c in run.cells] == [name for name, _ in cells]
    for path in sorted(DATA.glob("*.json")):
        load_run(path)
