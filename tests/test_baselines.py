"""The baseline store: schema checks that name file and field, merges that lose nothing, atomic writes."""

import json

import pytest

from ampbench.baselines import SCHEMA_VERSION, BaselineError, BaselineStore, load_document
from ampbench.device import gpu_slug


def write(path, document):
    path.write_text(json.dumps(document))
    return path


def doc(entries):
    return {"schema_version": SCHEMA_VERSION, "gpu": "NVIDIA H100 80GB HBM3", "entries": entries}


def test_slug():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_slug("Tesla T4") == "tesla-t4"


def test_missing_file_is_an_empty_store(tmp_path):
    store = BaselineStore.open(tmp_path, "GPU X", "gpu-x")
    assert not store.exists and store.figures("test_speed[a-b]") is None


def test_record_merges_and_keeps_other_entries(tmp_path):
    path = write(tmp_path / "gpu-x.json", doc({"test_speed[a-fp32]": {"figures": {"speedup": 1.0}, "software": {}}}))
    store = BaselineStore.open(tmp_path, "GPU X", "gpu-x")
    store.record("test_speed[a-bf16]", {"speedup": 2.5, "noise": 0.01}, {"torch": "2.11"})
    # someone else wrote the file meanwhile: their entry must survive our write too
    on_disk = json.loads(path.read_text())
    on_disk["entries"]["test_memory[a-bf16]"] = {"figures": {"max_batch": 512}, "software": {}}
    path.write_text(json.dumps(on_disk))
    store.write()
    entries = load_document(path)["entries"]
    assert set(entries) == {"test_speed[a-fp32]", "test_speed[a-bf16]", "test_memory[a-bf16]"}
    assert entries["test_speed[a-bf16]"]["figures"]["speedup"] == 2.5
    assert entries["test_speed[a-bf16]"]["software"] == {"torch": "2.11"}
    assert not list(tmp_path.glob("*.tmp")), "temp file left behind"


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
        BaselineStore.open(tmp_path, "GPU X", "gpu-x")
    assert info.value.field == field and str(path) in str(info.value)
    assert path.read_text() == before


def test_truncated_json_is_named(tmp_path):
    path = tmp_path / "gpu-x.json"
    path.write_text('{"schema_version": 1, "gpu": "g", "entr')
    with pytest.raises(BaselineError, match="not valid JSON"):
        BaselineStore.open(tmp_path, "GPU X", "gpu-x")


def test_record_refuses_nested_figures(tmp_path):
    store = BaselineStore.open(tmp_path, "GPU X", "gpu-x")
    with pytest.raises(TypeError, match="scalar"):
        store.record("t", {"curve": [1.0, 2.0]}, {})


def test_committed_baselines_are_valid():
    from pathlib import Path

    for path in (Path(__file__).parent.parent / "baselines").glob("*.json"):
        load_document(path)
