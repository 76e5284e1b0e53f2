"""The distributed cells over several nodes: the options and their usage errors, the world size nodes
share, the cluster N GPUs over M hosts are, the rendezvous command, a launch's plan, and two torchrun
agents on this machine (two "nodes" of one gloo rank each) running perf/test_distributed.py's DDP cells
of the smoke pass from two pytest processes, node 0 holding the results."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ampbench.device import cluster_slug
from ampbench.distributed.launch import rendezvous_command
from ampbench.distributed.nodes import launch_id
from ampbench.distributed.plan import node_argv, plan_document, same_share
from ampbench.distributed.variants import resolve_world_size, world_size_skip_reason
from ampbench.results import cluster_name, cluster_shape, cluster_size
from ampbench.settings import Nodes, endpoint_validator, rdzv_id_validator

ROOT = Path(__file__).resolve().parents[1]
CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)

pytest_plugins = ("pytester",)


def test_endpoint_and_rendezvous_id_validators():
    parse = endpoint_validator()
    assert parse("node0.example:29500") == "node0.example:29500"
    assert parse("[::1]:29500") == "[::1]:29500"
    for bad in ("node0", ":29500", "node0:http", "node0:0", "node0:70000", "::1:29500"):
        with pytest.raises(Exception, match="HOST:PORT|port"):
            parse(bad)
    assert rdzv_id_validator()("job-1234.a_b") == "job-1234.a_b"
    for bad in ("", "a b", "x" * 65, "id/1"):
        with pytest.raises(Exception, match="letters"):
            rdzv_id_validator()(bad)


@pytest.mark.parametrize("args, message", [
    (["--perf-nnodes", "2"], "needs --perf-node-rank and --perf-rdzv-endpoint"),
    (["--perf-nnodes", "2", "--perf-node-rank", "0"], "needs --perf-rdzv-endpoint"),
    (["--perf-nnodes", "2", "--perf-node-rank", "2", "--perf-rdzv-endpoint", "h:1"], "ranks of 2 nodes are 0 to 1"),
    (["--perf-node-rank", "1"], "--perf-node-rank: only with --perf-nnodes 2 or more"),
    (["--perf-nnodes", "2", "--perf-node-rank", "0", "--perf-rdzv-endpoint", "h:1", "--perf-world-size", "3"],
     "--perf-nnodes 2 cannot share it evenly"),
    (["--perf-rdzv-endpoint", "nohost"], "expects HOST:PORT"),
])
def test_node_options_refuse_what_cannot_run(pytester, args, message):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perf-device", "cpu", *args)
    assert result.ret != 0
    assert message in result.stderr.str(), result.stderr.str()


def test_nodes_share_the_world_size():
    assert resolve_world_size(None, CUDA, 1, 16, nodes=2) == 2  # one GPU on each of two nodes
    assert resolve_world_size(None, CUDA, 4, 16, nodes=2) == 8
    assert resolve_world_size(None, CPU, 0, 2, nodes=2) == 2  # one gloo process per node
    assert resolve_world_size(None, CPU, 0, 2, nodes=3) == 3
    assert resolve_world_size(4, CUDA, 2, 16, nodes=2) == 4
    with pytest.raises(ValueError, match="2 ranks on each of 2 nodes, only 1 GPU visible"):
        resolve_world_size(4, CUDA, 1, 16, nodes=2)
    # one GPU is a node's share of a world of two: the tests run
    assert world_size_skip_reason(2, CUDA, 1, nodes=2) is None
    assert world_size_skip_reason(2, CUDA, 1, nodes=1) == "needs 2+ GPUs, found 1"
    assert world_size_skip_reason(2, CUDA, 0, nodes=2) == "needs a GPU on each node, found none"


def test_gpus_over_several_hosts_are_a_cluster_of_their_own():
    gpu = "NVIDIA H100 80GB HBM3"
    assert cluster_name(gpu, 2) == f"{gpu} x2" and cluster_name(gpu, 2, 1) == f"{gpu} x2"
    assert cluster_name(gpu, 2, 2) == f"{gpu} x2 on 2 nodes"
    assert cluster_shape(cluster_name(gpu, 8, 2), gpu) == (8, 2) and cluster_shape(cluster_name(gpu, 4), gpu) == (4, 1)
    assert cluster_size(cluster_name(gpu, 2, 2), gpu) is None and cluster_size(cluster_name(gpu, 2), gpu) == 2
    assert cluster_shape(cluster_name(gpu, 2, 2), "NVIDIA H200") is None
    assert cluster_slug(gpu, 2) == "nvidia-h100-80gb-hbm3-x2"
    assert cluster_slug(gpu, 2, 2) == "nvidia-h100-80gb-hbm3-x2-2nodes"


def test_the_rendezvous_command_names_one_launch_and_who_hosts_its_store():
    nodes = Nodes(2, 1, "10.0.0.1:29500", "job7")
    cmd = rendezvous_command("ampbench.distributed.plan", ["--out", "/o"], 4, 2, nodes.endpoint,
                             launch_id(nodes, 3), hosts_store=False)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--standalone" not in cmd
    for arg in ("--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29500",
                "--rdzv-id=job7-3", "--max-restarts=0"):
        assert arg in cmd, (arg, cmd)
    conf = next(a for a in cmd if a.startswith("--rdzv-conf="))
    assert "is_host=0" in conf
    assert cmd[-4:] == ["-m", "ampbench.distributed.plan", "--out", "/o"]


def test_a_plan_names_each_node_s_own_folders():
    plan = plan_document("m", ["--out", "{out}", "--scenarios", "{files}/s.json", "--x", "1"], {"s.json": "[]"})
    assert node_argv(plan["argv"], Path("/n1/out"), Path("/n1/files")) == [
        "--out", "/n1/out", "--scenarios", "/n1/files/s.json", "--x", "1"]
    assert same_share({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2"}) is None
    assert "every node must run as many" in same_share({"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2",
                                                        "GROUP_WORLD_SIZE": "2"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_one_host_run_the_ddp_cells_and_node_0_holds_the_results(tmp_path):
    """Two pytest processes, each the node of one torchrun agent with one gloo rank, rendezvous at
    127.0.0.1: node 0's JSON holds the DDP cell of mlp amp_bf16, measured by two ranks on two nodes,
    and node 1 says that it ran its ranks in node 0's launch and holds nothing."""
    endpoint = f"127.0.0.1:{_free_port()}"
    common = [sys.executable, "-m", "pytest", "perf/test_distributed.py", "-p", "no:cacheprovider", "-q",
              "--perf-device", "cpu", "--perf-world-size", "2", "--perf-nnodes", "2", "--perf-rdzv-endpoint", endpoint,
              "--perf-models", "mlp", "--perf-precisions", "amp_bf16", "-k", "test_ddp_speed and not hook",
              "--benchmark-json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    procs = {rank: subprocess.Popen([*common, str(tmp_path / f"node{rank}.json"), "--perf-node-rank", str(rank)],
                                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (1, 0)}
    out = {}
    deadline = time.monotonic() + 240
    for rank, proc in procs.items():
        try:
            out[rank], _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            pytest.fail(f"node {rank} did not finish in 240 s")
    assert procs[0].returncode == 0, out[0][-3000:]
    assert procs[1].returncode == 0, out[1][-3000:]
    cells = json.loads((tmp_path / "node0.json").read_text())["benchmarks"]
    assert [b["name"] for b in cells] == ["test_ddp_speed[mlp-amp_bf16-fp32]"]
    for b in cells:
        info = b["extra_info"]
        assert (info["world_size"], info["nodes"], info["backend"]) == (2, 2, "gloo"), info
        assert info["weights_moved"] and info["ratios"]["wall"]["speedup"] > 0, info
    assert not (tmp_path / "node1.json").exists(), "node 1 wrote results of its own"
    assert "node 1 of 2 ran its ranks in 1 of node 0's launches" in out[1] and "node 0 holds the results" in out[1]
    assert "launch 0: mlp amp_bf16 fp32: done" in out[1], out[1][-2000:]
