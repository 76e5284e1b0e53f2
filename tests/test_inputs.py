"""Files the user names, read and written: only regular files are read (a FIFO never blocks), a key
given twice in one JSON object is refused, every field of a baseline entry is checked, and every
writer follows a symlink to its real file."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from ampbench.baselines.file import BaselineError, load_document, validate_directory
from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.files.read import UnreadableFile, read_text
from ampbench.files.write import unwritable_reason, write_text_atomic
from ampbench.results import RunError, load_run

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def never_hangs():
    """A read that blocks fails the test after 10 s instead of hanging the suite."""

    def hung(signum, frame):
        raise TimeoutError("blocked for 10 s")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


SPECIAL = {
    "fifo": (_fifo, "is a FIFO (named pipe), not a regular file"),
    "device": (lambda p: p.symlink_to(os.devnull) or p, "is a character device, not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
}


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_the_reader_refuses_anything_but_a_regular_file_without_blocking(tmp_path, never_hangs, kind):
    make, words = SPECIAL[kind]
    path = make(tmp_path / "x.json")
    with pytest.raises(UnreadableFile) as info:
        read_text(path, "a baseline file")
    assert str(info.value) == f"{path}: {words}; give a baseline file"


def test_a_fifo_in_the_baseline_folder_is_named_and_nothing_waits_on_it(tmp_path, never_hangs):
    (tmp_path / "nvidia-h100-80gb-hbm3.json").write_text(json.dumps({"schema_version": 1, "gpu": H100, "entries": {}}))
    fifo = _fifo(tmp_path / "tesla-t4.json")
    with pytest.raises(BaselineError) as info:
        validate_directory(tmp_path)
    assert str(info.value).startswith(f"baseline file {fifo}: field '<file>': is a FIFO (named pipe)")


@pytest.mark.parametrize("argv", [
    lambda fifo: ["report", fifo, "-o", str(Path(fifo).parent / "r")],
    lambda fifo: ["compare", fifo, fifo],
    lambda fifo: ["baselines", "show", fifo],
    lambda fifo: ["baselines", "merge", str(Path(fifo).parent / "new.json"), fifo],
], ids=["report", "compare", "baselines show", "baselines merge"])
def test_every_command_refuses_a_fifo_at_once(tmp_path, capsys, never_hangs, argv):
    fifo = _fifo(tmp_path / "x.json")
    assert main(argv(str(fifo))) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{fifo}: " in err and "is a FIFO (named pipe)" in err, err


# -- a key given twice ------------------------------------------------------------------------------

def test_a_key_given_twice_in_a_baseline_file_is_named(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text('{"schema_version": 1, "gpu": "g", "entries": {"test_speed[mlp-fp16]": '
                    '{"figures": {"speedup": 2.0, "speedup": 3.0}}}}')
    with pytest.raises(BaselineError) as info:
        load_document(path)
    assert str(info.value) == (f"baseline file {path}: field 'speedup': appears twice in one object, and a reader "
                               "keeps only one of its values")


def test_a_key_given_twice_in_a_run_is_named(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"benchmarks": [], "machine_info": {}, "machine_info": {}}')
    with pytest.raises(RunError, match="key 'machine_info' appears twice in one object"):
        load_run(path)


# -- every field of an entry ------------------------------------------------------------------------

def _entry(**fields) -> dict:
    return {"figures": {"speedup": 2.0}, "software": {"torch": "2.11.0", "cudnn": 91900, "torchao": None},
            "recorded": "2026-01-01T00:00:00Z", **fields}


def _file(path: Path, entry: dict) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "gpu": H100, "entries": {"test_speed[mlp-fp16]": entry}}))
    return path


@pytest.mark.parametrize("fields, field, problem", [
    ({"recorded": None}, "recorded", "null is not a UTC ISO 8601 time"),
    ({"recorded": 1767225600}, "recorded", "1767225600 is not a UTC ISO 8601 time"),
    ({"recorded": "yesterday"}, "recorded", '"yesterday" is not a UTC ISO 8601 time'),
    ({"recorded": "2026-01-01T00:00:00+02:00"}, "recorded", "is not a UTC ISO 8601 time"),
    ({"recorded": "2026-13-01T00:00:00Z"}, "recorded", "is not a UTC ISO 8601 time"),
    ({"software": {"torch": ["2.11"]}}, "software.torch", "['2.11'] is not a string, an integer or null"),
    ({"software": {"cuda": True}}, "software.cuda", "true is not a string, an integer or null"),
    ({"when": "now"}, "when", "not a field of an entry (figures, recorded, software)"),
])
def test_every_field_of_an_entry_is_checked(tmp_path, fields, field, problem):
    path = _file(tmp_path / "gpu.json", _entry(**fields))
    with pytest.raises(BaselineError) as info:
        load_document(path)
    assert info.value.field == f"entries.test_speed[mlp-fp16].{field}" and problem in str(info.value), info.value


def test_an_entry_without_a_stamp_is_still_one(tmp_path):
    entry = _entry()
    del entry["recorded"]
    assert load_document(_file(tmp_path / "gpu.json", entry))["entries"]


def test_merge_of_a_part_with_a_null_stamp_is_a_usage_error_naming_it(tmp_path, capsys):
    base = _file(tmp_path / "gpu.json", _entry())
    part = _file(tmp_path / "part.json", _entry(recorded=None))
    assert main(["baselines", "merge", str(base), str(part)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == (f"ampbench: error: baseline file {part}: field 'entries.test_speed[mlp-fp16].recorded': null is not "
                   'a UTC ISO 8601 time such as "2026-01-31T17:02:11Z"\n'), err


# -- writers follow a symlink to its real file ----------------------------------------------------------

def test_merge_into_a_symlink_updates_the_real_file_and_keeps_the_link(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    real = _file(tmp_path / "real" / "x.json", _entry())
    link = tmp_path / "link.json"
    link.symlink_to(Path("real") / "x.json")
    part = _file(tmp_path / "part.json", _entry(recorded="2026-02-01T00:00:00Z", figures={"speedup": 3.0}))
    assert main(["baselines", "merge", str(link), str(part)]) == EXIT_OK
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "x.json")
    assert load_document(real)["entries"]["test_speed[mlp-fp16]"]["figures"]["speedup"] == 3.0
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["x.json"], "a temp file was left behind"


def test_an_atomic_write_never_replaces_a_special_file(tmp_path, never_hangs):
    fifo = _fifo(tmp_path / "out.json")
    with pytest.raises(OSError) as info:
        write_text_atomic(fifo, "{}")
    assert info.value.filename == str(fifo) and info.value.strerror == "is a FIFO (named pipe), not a regular file"
    assert fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert unwritable_reason(fifo) == f"{fifo} is a FIFO (named pipe), not a file"


def test_a_write_checked_without_making_folders_names_the_missing_folder(tmp_path):
    assert unwritable_reason(tmp_path / "no" / "x.json", make_parents=False) == (f"folder {tmp_path / 'no'} does not "
                                                                                 "exist")
    assert unwritable_reason(tmp_path / "no" / "x.json") is None
    assert unwritable_reason(tmp_path, make_parents=False) == f"{tmp_path} is a directory, not a file"
