"""The multi-node examples (examples/multi-node/) against their formats: the SLURM batch script's #SBATCH
options against sbatch's option names (simple-slurm's list of them), the PyTorchJob manifest, loaded as
YAML, field by field against the Kubeflow training operator's PyTorchJob model (kubeflow-training) and
Kubernetes' models (kubernetes) under it; and each runs perf/test_distributed.py with the node options,
the same command on every node. The packages come with the ``examples`` extra."""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path

import pytest

from ampbench.plugin.options import add_options

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "multi-node"
SBATCH = EXAMPLES / "slurm-two-nodes.sbatch"
PYTORCHJOB = EXAMPLES / "pytorchjob-two-nodes.yaml"
NODE_OPTIONS = ("--perf-nnodes", "--perf-node-rank", "--perf-rdzv-endpoint", "--perf-rdzv-id")
MISSING = "needs the examples extra: pip install -e '.[examples]'"


class _Group:
    def __init__(self):
        self.flags: set[str] = set()

    def addoption(self, *names, **_):
        self.flags.update(names)


def perf_flags() -> set[str]:
    group = _Group()
    add_options(group, detail=False)
    return group.flags


def check_pytest_command(command: str, where: str) -> None:
    """`command` runs perf/test_distributed.py with every node option, and every --perf-* flag it names exists."""
    words = shlex.split(command)
    assert "pytest" in words and "perf/test_distributed.py" in words, f"{where}: runs {command!r}"
    flags = {w.split("=")[0] for w in words if w.startswith("--perf-")}
    assert set(NODE_OPTIONS) <= flags, f"{where}: lacks {sorted(set(NODE_OPTIONS) - flags)}"
    unknown = flags - perf_flags()
    assert not unknown, f"{where}: no such ampbench option {sorted(unknown)}"


def sbatch_names() -> set[str]:
    """sbatch's long and short option names, as simple-slurm ships them ("name,letter" a line)."""
    simple_slurm = pytest.importorskip("simple_slurm", reason=MISSING)
    text = resources.files(simple_slurm).joinpath("arguments.txt").read_text()
    names = set()
    for line in filter(None, map(str.strip, text.splitlines())):
        long, _, short = line.partition(",")
        names.add("--" + long.replace("_", "-"))
        if short:
            names.add("-" + short)
    return names


def test_the_slurm_script_s_options_are_sbatch_s_and_it_runs_one_pytest_per_node():
    known = sbatch_names()
    lines = [ln for ln in SBATCH.read_text().splitlines() if ln.startswith("#SBATCH")]
    assert lines, f"{SBATCH}: no #SBATCH line"
    options = {}
    for line in lines:
        words = shlex.split(line[len("#SBATCH"):])
        assert words, f"{SBATCH}: an empty #SBATCH line"
        name, _, value = words[0].partition("=")
        assert name in known, f"{SBATCH}: {name} is no sbatch option"
        options[name] = value or (words[1] if len(words) > 1 else "")
    assert options.get("--nodes") == "2" and options.get("--ntasks-per-node") == "1", options
    body = SBATCH.read_text()
    command = re.search(r"srun .*?bash -c '(.*?)'", body, re.DOTALL)
    assert command, f"{SBATCH}: no srun of one bash command per node"
    check_pytest_command(command.group(1).replace("\\\n", " "), str(SBATCH))
    assert '--perf-node-rank "$SLURM_NODEID"' in command.group(1)


def _model(name: str):
    training = pytest.importorskip("kubeflow.training.models", reason=MISSING)
    kubernetes = pytest.importorskip("kubernetes.client.models", reason=MISSING)
    return getattr(training, name, None) or getattr(kubernetes, name)


PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def model_problems(value, type_name: str, where: str) -> list[str]:
    """Every field of `value` that the OpenAPI model `type_name` (and the models under it) does not know,
    or whose value is of another type."""
    inner = re.fullmatch(r"list\[(.+)\]", type_name)
    if inner:
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [p for i, v in enumerate(value) for p in model_problems(v, inner.group(1), f"{where}[{i}]")]
    inner = re.fullmatch(r"dict\((\w+), (.+)\)", type_name)
    if inner:
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        return [p for k, v in value.items() for p in model_problems(v, inner.group(2), f"{where}.{k}")]
    if type_name in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[type_name]) and not (type_name == "int" and isinstance(value, bool))
        return [] if ok else [f"{where}: expected {type_name}, got {value!r}"]
    model = _model(type_name)
    if not isinstance(value, dict):
        return [f"{where}: expected a {type_name} mapping"]
    attrs = {json_name: attr for attr, json_name in model.attribute_map.items()}
    problems = [f"{where}.{key}: no such field of {type_name}" for key in value if key not in attrs]
    for key, v in value.items():
        if key in attrs:
            problems += model_problems(v, model.openapi_types[attrs[key]], f"{where}.{key}")
    return problems


def test_the_pytorchjob_manifest_is_a_pytorchjob_and_every_pod_runs_the_same_command():
    yaml = pytest.importorskip("yaml", reason=MISSING)
    job = yaml.safe_load(PYTORCHJOB.read_text())
    assert (job.get("apiVersion"), job.get("kind")) == ("kubeflow.org/v1", "PyTorchJob"), job.get("kind")
    problems = model_problems(job, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    assert not problems, "\n".join(problems)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"} and all(s["replicas"] == 1 for s in specs.values()), specs
    commands = set()
    for role, spec in specs.items():
        (container,) = spec["template"]["spec"]["containers"]
        # the operator finds the training container by this name, and gives it MASTER_ADDR and RANK
        assert container["name"] == "pytorch", f"{role}: container {container['name']!r}"
        command = " ".join(container["command"][1:] + container["args"])
        check_pytest_command(command.replace('"', ""), f"{PYTORCHJOB} {role}")
        commands.add(command)
    assert len(commands) == 1, f"the pods run different commands: {commands}"


def test_the_model_check_catches_a_misspelt_field():
    """The check has teeth: a field the models do not know, and a value of another type, are found."""
    bad = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": "one", "template": {"spec": {
               "containers": [{"name": "pytorch", "image": "x", "comand": ["pytest"]}]}}}}}}
    problems = model_problems(bad, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    assert any("comand: no such field" in p for p in problems), problems
    assert any("replicas: expected int" in p for p in problems), problems
