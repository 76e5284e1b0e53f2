"""The baseline store: schema checks that name file and field, merges that lose nothing, atomic writes."""

import json
import os
import stat
from pathlib import Path

import pytest

from ampbench.baselines.file import (
    SCHEMA_VERSION,
    BaselineError,
    BaselineFile,
    load_document,
    validate_directory,
)
from ampbench.device import gpu_slug
from ampbench.files import write as outputs
from ampbench.files.write import unwritable_reason, write_atomic
from ampbench.results.ratios import DEVICE, VERSUS, WALL

ROOT = Path(__file__).parent.parent
NAN, INF = float("nan"), float("inf")
SPEED = "test_speed[mlp-amp_fp16]"
MEMORY = "test_memory[mlp-amp_fp16]"
CONVERGENCE = "test_convergence[mnist_cnn-amp_fp16]"


def write(path, document):
    path.write_text(json.dumps(document))
    return path


def doc(entries):
    return {"schema_version": SCHEMA_VERSION, "gpu": "NVIDIA H100 80GB HBM3", "entries": entries}


def test_slug():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_slug("Tesla T4") == "tesla-t4"


def test_missing_file_is_an_empty_store(tmp_path):
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    assert not store.exists and store.figures("test_speed[a-b]") is None


def test_record_merges_and_keeps_other_entries(tmp_path):
    path = write(tmp_path / "gpu-x.json", doc({"test_speed[a-fp32]": {"figures": {"speedup": 1.0}, "software": {}}}))
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    store.record("test_speed[a-bf16]", {"speedup": 2.5, "noise": 0.01}, {"torch": "2.11"})
    # someone else wrote the file meanwhile: their entry must survive our write too
    on_disk = json.loads(path.read_text())
    on_disk["entries"]["test_memory[a-bf16]"] = {"figures": {"max_batch": 512,
                                                             "peak_mem_bytes": 2**30, "memory_ratio": 0.6},
                                                 "software": {}}
    path.write_text(json.dumps(on_disk))
    store.write()
    entries = load_document(path)["entries"]
    assert set(entries) == {"test_speed[a-fp32]", "test_speed[a-bf16]", "test_memory[a-bf16]"}
    assert entries["test_speed[a-bf16]"]["figures"]["speedup"] == 2.5
    assert entries["test_speed[a-bf16]"]["software"] == {"torch": "2.11"}
    assert not list(tmp_path.glob("*.tmp")), "temp file left behind"


FULL_MEMORY = {  # a full-tier recording: the default batch and the largest batch with its budget
    "batch_size": 256, "peak_mem_bytes": 2**30, "memory_ratio": 0.6, "max_batch": 4096, "max_batch_ratio": 1.6,
    "max_batch_step": 64, "max_batch_limited": False, "max_batch_throughput": 9e5, "max_batch_throughput_ratio": 2.1,
    "cap_bytes": 24 * 2**30, "alloc_conf": None,
}
QUICK_MEMORY = {"batch_size": 256, "peak_mem_bytes": 2**30 - 2**20, "memory_ratio": 0.59}  # no search


def test_a_recording_without_the_largest_batch_keeps_the_old_entrys(tmp_path):
    """A quick-tier recording measures the default batch only: the largest batch a full-tier recording
    stored stays, with its cap, and says when it was measured."""
    path = write(tmp_path / "gpu-x.json", doc({MEMORY: {"figures": FULL_MEMORY, "software": {"torch": "2.10"},
                                                        "recorded": "2026-01-01T00:00:00Z"}}))
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    store.record(MEMORY, QUICK_MEMORY, {"torch": "2.11"})
    store.write()
    entry = load_document(path)["entries"][MEMORY]
    largest = {k: v for k, v in FULL_MEMORY.items() if k not in QUICK_MEMORY}
    assert entry["figures"] == {**QUICK_MEMORY, **largest, "max_batch_recorded": "2026-01-01T00:00:00Z"}
    assert entry["software"] == {"torch": "2.11"} and entry["recorded"] > "2026-01-01T00:00:00Z"
    assert store.figures(MEMORY)["max_batch"] == 4096  # what the next test of the same pytest run reads

    # a second quick recording keeps the stamp of the measurement, not of the entry it replaces
    store.record(MEMORY, dict(QUICK_MEMORY, memory_ratio=0.58), {"torch": "2.11"})
    store.write()
    figures = load_document(path)["entries"][MEMORY]["figures"]
    assert figures["memory_ratio"] == 0.58 and figures["max_batch"] == 4096
    assert figures["max_batch_recorded"] == "2026-01-01T00:00:00Z"

    # a full recording measures its own: nothing is carried, and the stamp goes
    store.record(MEMORY, dict(FULL_MEMORY, max_batch=4160), {"torch": "2.11"})
    store.write()
    assert load_document(path)["entries"][MEMORY]["figures"] == dict(FULL_MEMORY, max_batch=4160)


def test_only_the_named_groups_are_carried(tmp_path):
    """A speed entry's optional figures (kernels, compile time) are the new recording's business, and a
    memory entry never recorded by the full tier gets no largest batch."""
    path = write(tmp_path / "gpu-x.json", doc({
        SPEED: {"figures": {"speedup": 2.0, "compile_s": 30.0}, "software": {}, "recorded": "2026-01-01T00:00:00Z"},
        MEMORY: {"figures": QUICK_MEMORY, "software": {}, "recorded": "2026-01-01T00:00:00Z"}}))
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    store.record(SPEED, {"speedup": 2.1}, {})
    store.record(MEMORY, dict(QUICK_MEMORY, memory_ratio=0.58), {})
    store.write()
    entries = load_document(path)["entries"]
    assert entries[SPEED]["figures"] == {"speedup": 2.1}
    assert entries[MEMORY]["figures"] == dict(QUICK_MEMORY, memory_ratio=0.58)


@pytest.mark.parametrize(
    "document, field",
    [
        ({"schema_version": 99, "gpu": "g", "entries": {}}, "schema_version"),
        ({"gpu": "g", "entries": {}}, "schema_version"),
        ({"schema_version": SCHEMA_VERSION, "entries": {}}, "gpu"),
        ({"schema_version": SCHEMA_VERSION, "gpu": "g", "entries": []}, "entries"),
        (doc({"t": {"software": {}}}), "entries.t.figures"),
        (doc({"t": {"figures": {"speedup": [1, 2]}}}), "entries.t.figures.speedup"),
        ([1, 2], "<top level>"),
    ],
)
def test_malformed_files_name_file_and_field(tmp_path, document, field):
    path = write(tmp_path / "gpu-x.json", document)
    before = path.read_text()
    with pytest.raises(BaselineError) as info:
        BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    assert info.value.field == field and str(path) in str(info.value)
    assert path.read_text() == before


def test_truncated_json_is_named(tmp_path):
    path = tmp_path / "gpu-x.json"
    path.write_text('{"schema_version": 1, "gpu": "g", "entr')
    with pytest.raises(BaselineError, match="is truncated: the JSON stops at line 1"):
        BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    path.write_text('{"schema_version": 1, oops}')
    with pytest.raises(BaselineError) as info:
        BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    assert str(info.value).endswith(
        "is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 23)")


def test_record_refuses_nested_figures(tmp_path):
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    with pytest.raises(BaselineError, match="not a number, string, boolean or null"):
        store.record(SPEED, {"speedup": 2.0, "curve": [1.0, 2.0]}, {})


def test_committed_baselines_are_valid():
    paths = sorted((ROOT / "baselines").glob("*.json"))
    assert paths, f"no baseline file in {ROOT / 'baselines'}"
    for path in paths:
        entries = load_document(path)["entries"]
        assert entries, f"{path}: no entries"
        # one GPU's file holds its speed cells; an N-GPU one (<slug>-xN) its distributed cells
        kinds = ("test_ddp_speed[",) if "-x" in path.stem else ("test_speed[",)
        assert any(test_id.startswith(kinds) for test_id in entries), f"{path}: no entry of {kinds}"


# ---------------------------------------------------------------------------------------------------
# one schema per kind of entry


@pytest.mark.parametrize(
    "test_id, figures, field, problem",
    [
        (SPEED, {"speedup": NAN}, "speedup", "NaN is not a finite positive number"),
        (SPEED, {"speedup": INF}, "speedup", "Infinity is not a finite positive number"),
        (SPEED, {"speedup": 0}, "speedup", "0 is not a finite positive number"),
        (SPEED, {"speedup": -1.5}, "speedup", "is not a finite positive number"),
        (SPEED, {"speedup": "2.3x"}, "speedup", '"2.3x" is not a finite positive number'),
        (SPEED, {"speedup": True}, "speedup", "true is not a finite positive number"),
        (SPEED, {"speedup": None}, "speedup", "null is not a finite positive number"),
        (SPEED, {"noise": 0.01}, "speedup", "missing; a test_speed entry needs a finite positive number"),
        (SPEED, {"speedup": 2.0, "noise": NAN}, "noise", "NaN is not a finite number >= 0"),
        (SPEED, {"speedup": 2.0, "noise": -0.01}, "noise", "is not a finite number >= 0"),
        (SPEED, {"speedup": 2.0, "between_run_sd": "0.01"}, "between_run_sd", "is not a finite number >= 0"),
        (SPEED, {"speedup": 2.0, "between_run_count": 2.5}, "between_run_count", "is not an integer >= 1"),
        (SPEED, {"speedup": 2.0, "between_run_count": True}, "between_run_count", "is not an integer >= 1"),
        (SPEED, {"speedup": 2.0, "block_seconds": 0}, "block_seconds", "is not a finite positive number"),
        (SPEED, {"speedup": 2.0, "cudnn_benchmark": "off"}, "cudnn_benchmark", "is not true or false"),
        (SPEED, {"speedup": 2.0, "ci_low": NAN}, "ci_low", "NaN is not a finite number"),
        (MEMORY, {"memory_ratio": 0.6}, "peak_mem_bytes", "missing"),
        (MEMORY, {"peak_mem_bytes": 2**30, "memory_ratio": NAN}, "memory_ratio", "NaN is not a finite positive number"),
        (MEMORY, {"peak_mem_bytes": 0, "memory_ratio": 0.6}, "peak_mem_bytes", "is not a finite positive number"),
        (MEMORY, {"peak_mem_bytes": 1, "memory_ratio": 0.6, "max_batch": 0}, "max_batch", "is not an integer >= 1"),
        (MEMORY, {"peak_mem_bytes": 1, "memory_ratio": 0.6, "cap_bytes": -1}, "cap_bytes", "is not a finite positive"),
        (MEMORY, {"peak_mem_bytes": 1, "memory_ratio": 0.6, "alloc_conf": 3}, "alloc_conf", "is not a string or null"),
        (CONVERGENCE, {"margin": NAN}, "margin", "NaN is not null or a finite number in [0, 1]"),
        (CONVERGENCE, {"margin": 3}, "margin", "3 is not null or a finite number in [0, 1]"),
        (SPEED, {"speedup": 2.0, "kernels": [{"name": "gemm"}]}, "kernels", 'a finite number "ms"'),
        (SPEED, {"speedup": 2.0, "kernels": {"gemm": 1.0}}, "kernels", "neither a string nor a list"),
        (SPEED, {"speedup": 2.0, "device_speedup": [2.0]}, "device_speedup", "not a number, string, boolean or null"),
        ("test_other[x]", {"seconds": INF}, "seconds", "Infinity is not a finite number"),
    ],
)
def test_entries_are_held_to_their_kinds_schema(tmp_path, test_id, figures, field, problem):
    path = write(tmp_path / "gpu-x.json", doc({test_id: {"figures": figures, "software": {}}}))
    with pytest.raises(BaselineError) as info:
        load_document(path)
    assert info.value.field == f"entries.{test_id}.figures.{field}"
    assert str(path) in str(info.value) and problem in str(info.value), str(info.value)


def test_the_message_names_the_file_and_the_field(tmp_path):
    path = write(tmp_path / "gpu-x.json", doc({SPEED: {"figures": {"speedup": NAN}}}))
    with pytest.raises(BaselineError) as info:
        load_document(path)
    assert str(info.value) == (f"baseline file {path}: field 'entries.test_speed[mlp-amp_fp16].figures.speedup': "
                               "NaN is not a finite positive number")


def test_a_learned_spreads_terms_may_be_null_and_read_as_absent(tmp_path):
    """An export from the history writes null for a card term of 0 and for no pooled prior, where the file
    held a figure before; the file it wrote loads, its entry records again, and the spread reads as without them."""
    from ampbench.baselines.entries import SpeedEntry, learned_spread

    nulls = {f"device_{name}": None for name in ("between_card_sd", "between_card_dof", "between_run_pooled_dof",
                                                 "between_run_pooled_sd")}
    figures = {"speedup": 2.0, "device_speedup": 2.1, "device_recorded_speedup": 2.12, "device_between_run_sd": 0.01,
               "device_between_run_count": 6, **nulls}
    path = write(tmp_path / "gpu-x.json", doc({SPEED: {"figures": figures, "software": {}}}))
    assert load_document(path)["entries"][SPEED]["figures"] == figures
    store = BaselineFile.open(tmp_path, "NVIDIA H100 80GB HBM3", "gpu-x")
    store.record(SPEED, figures, {})
    store.write()
    spread = learned_spread(SpeedEntry.from_figures(figures).ratio(DEVICE))
    assert spread is not None
    assert (spread.sd, spread.card_sd, spread.pooled_dof, spread.card_dof) == (0.01, 0.0, 0, None)
    for name, value, problem in [("device_between_card_sd", -0.01, "is not null or a finite number >= 0"),
                                 ("device_between_card_dof", 0, "0 is not null or an integer >= 1"),
                                 ("device_between_run_pooled_dof", 1.5, "is not null or an integer >= 1"),
                                 ("device_between_run_pooled_sd", NAN, "NaN is not null or a finite number >= 0")]:
        write(path, doc({SPEED: {"figures": {**figures, name: value}}}))
        with pytest.raises(BaselineError, match=problem):
            load_document(path)


def test_extra_figures_stay_allowed(tmp_path):
    figures = {"speedup": 2.0, "noise": 0.0, "between_run_sd": 0.01, "between_run_count": 3, "device_speedup": 2.1,
               "device_noise": 0.01, "device_tolerance": 0.03, "anything_new": "text", "flag": None,
               "kernels": [{"name": "sm90_gemm", "ms": 0.25}, {"name": "elementwise", "ms": 0}]}
    path = write(tmp_path / "gpu-x.json", doc({
        SPEED: {"figures": figures, "software": {}},
        "test_speed[gpt-fp32]": {"figures": {"speedup": 1.0, "kernels": "sm90_gemm 0.25 ms"}},
        MEMORY: {"figures": {"peak_mem_bytes": 2**30, "memory_ratio": 0.6, "alloc_conf": None}},
        CONVERGENCE: {"figures": {"margin": None, "accuracy": 0.97}},
        "test_input_pipeline[dpn26-fp32]": {"figures": {"loader_ratio": 0.9}},
    }))
    assert load_document(path)["entries"][SPEED]["figures"] == figures


def test_record_holds_an_entry_to_its_schema_and_takes_kernels(tmp_path):
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    with pytest.raises(BaselineError, match="speedup.*NaN is not a finite positive number"):
        store.record(SPEED, {"speedup": NAN}, {})
    with pytest.raises(BaselineError, match="peak_mem_bytes.*missing"):
        store.record(MEMORY, {"memory_ratio": 0.5}, {})
    assert not store.pending
    kernels = [{"name": "sm90_gemm", "ms": 0.25}]
    store.record(SPEED, {"speedup": 2.0, "kernels": kernels}, {})
    store.write()
    assert load_document(store.path)["entries"][SPEED]["figures"]["kernels"] == kernels


def test_a_directory_is_validated_file_by_file(tmp_path):
    assert validate_directory(tmp_path / "absent") == []
    write(tmp_path / "a.json", doc({SPEED: {"figures": {"speedup": 2.0}}}))
    bad = write(tmp_path / "b.json", doc({SPEED: {"figures": {"speedup": "2.3x"}}}))
    (tmp_path / "notes.txt").write_text("not a baseline")
    with pytest.raises(BaselineError) as info:
        validate_directory(tmp_path)
    assert info.value.path == bad
    bad.unlink()
    assert validate_directory(tmp_path) == [tmp_path / "a.json"]


# ---------------------------------------------------------------------------------------------------
# writes


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_an_atomic_write_keeps_the_files_mode(tmp_path, umask_022):
    path = write(tmp_path / "gpu-x.json", doc({}))
    for mode in (0o644, 0o664, 0o600):
        path.chmod(mode)
        write_atomic(path, doc({SPEED: {"figures": {"speedup": 2.0}}}))
        assert stat.S_IMODE(path.stat().st_mode) == mode
        assert load_document(path)["entries"]


def test_a_new_file_gets_the_umasks_mode(tmp_path, umask_022):
    path = tmp_path / "sub" / "gpu-x.json"
    write_atomic(path, doc({}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    os.umask(0o002)
    write_atomic(tmp_path / "other.json", doc({}))
    assert stat.S_IMODE((tmp_path / "other.json").stat().st_mode) == 0o664


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another owner")
def test_an_atomic_write_keeps_the_files_owner(tmp_path):
    path = write(tmp_path / "gpu-x.json", doc({}))
    os.chown(path, 4321, 4322)
    write_atomic(path, doc({}))
    assert (path.stat().st_uid, path.stat().st_gid) == (4321, 4322)


def test_an_atomic_write_goes_on_where_the_owner_cannot_be_kept(tmp_path, monkeypatch):
    path = write(tmp_path / "gpu-x.json", doc({}))
    monkeypatch.setattr(outputs.os, "geteuid", lambda: path.stat().st_uid + 1)  # as if another user wrote it

    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(outputs.os, "fchown", refuse)
    write_atomic(path, doc({SPEED: {"figures": {"speedup": 2.0}}}))
    assert SPEED in load_document(path)["entries"]


def test_unwritable_targets_are_named(tmp_path, monkeypatch):
    assert unwritable_reason(tmp_path / "gpu-x.json") is None
    assert unwritable_reason(tmp_path / "new" / "deeper" / "gpu-x.json") is None
    assert not (tmp_path / "new").exists(), "the check must not create the folder"
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert unwritable_reason(blocker / "gpu-x.json") == f"{blocker} is not a directory"

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    real_mkstemp = outputs.tempfile.mkstemp
    if os.geteuid() == 0:  # root writes through 0o555; refuse as the kernel refuses anyone else
        def mkstemp(*args, dir=None, **kwargs):
            if Path(dir) == locked:
                raise PermissionError(13, "Permission denied")
            return real_mkstemp(*args, dir=dir, **kwargs)

        monkeypatch.setattr(outputs.tempfile, "mkstemp", mkstemp)
    try:
        assert unwritable_reason(locked / "gpu-x.json") == f"cannot create a file in {locked}: Permission denied"
    finally:
        locked.chmod(0o755)


def test_the_committed_baseline_files_read_as_typed_entries_and_save_back_byte_identical(tmp_path):
    import json

    from ampbench.baselines.entries import DistributedEntry, SpeedEntry
    from ampbench.baselines.file import load_document
    from ampbench.files.write import write_atomic

    root = Path(__file__).resolve().parents[1] / "baselines"
    paths = sorted(root.glob("*.json"))
    assert paths
    for path in paths:
        document = load_document(path)
        for test_id, entry in document["entries"].items():
            kind = (SpeedEntry if test_id.startswith("test_speed[") else DistributedEntry if "_speed[" in test_id
                    else None)
            if kind is not None:
                entry["figures"] = kind.from_figures(entry["figures"]).to_figures()
        out = tmp_path / path.name
        write_atomic(out, document)
        assert out.read_bytes() == path.read_bytes(), path.name
        assert json.loads(out.read_text()) == json.loads(path.read_text())


def test_a_speed_entrys_ratios_read_by_their_prefix():
    from ampbench.baselines.entries import SpeedEntry

    entry = SpeedEntry.from_figures({"speedup": 2.0, "noise": 0.01, "device_speedup": 2.2, "device_method": "graph",
                                     "versus": "amp_bf16", "versus_speedup": 1.3, "step_ms": 4.0, "other": 1})
    assert entry.ratio(WALL).speedup == 2.0 and entry.ratio(WALL).noise == 0.01 and entry.ratio(WALL).step_ms == 4.0
    assert (entry.ratio(DEVICE).speedup == 2.2 and entry.ratio(DEVICE).method == "graph"
            and entry.ratio(DEVICE).noise is None)
    assert entry.versus == "amp_bf16" and entry.ratio(VERSUS).speedup == 1.3
    assert entry.detail == {"other": 1} and list(entry.to_figures()) == ["speedup", "noise", "device_speedup",
                                                                          "device_method", "versus", "versus_speedup",
                                                                          "step_ms", "other"]
