"""Loss scaling across ranks, property-tested: when only one rank's gradients overflow, every rank skips
the step, and afterwards all ranks hold the same scale, the same growth tracker and bit-identical
weights, with the scale following the single-process reference trajectory of "some rank overflowed".

Under DDP (torch.amp.GradScaler) the all-reduce spreads one rank's inf to every rank; under FSDP2
(ShardedGradScaler, and plain GradScaler on DTensor gradients) each rank holds only its shard of the
reduced gradient, so the scaler itself must agree on the overflow. The poison lands in one row of a
layer that FSDP2 shards by rows, so only one rank's shard sees it (checked: the hard case must occur).
A control setup whose ranks never communicate must fail the same checks, so they have teeth.

Starting torchrun per hypothesis example would take ~10 s each, so hypothesis draws the scenarios here
in the parent (``perf/strategies.py`` ``dist_scenarios``; the profile's max_examples of them, a quarter
on the CPU, plus the explicit ones below), one launch runs them all in every setup of
``ampbench.distributed.loss_scaling_worker.SETUPS``, and
each scenario is judged on the returned JSON; a failure prints the scenario to replay.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from ampbench.distributed.loss_scaling_worker import SETUPS, WIDTH
from ampbench.plugin.distributed import launcher_of
from perf import strategies as S
from perf.scalers import expected_trajectory
from perf.strategies import DistScenario, RankPoison, ScalerConfig

pytestmark = pytest.mark.torchrun
INF, NAN = float("inf"), float("nan")
LAUNCH_SECONDS = {"cpu": 150.0, "cuda": 300.0}


def explicit_scenarios(world_size: int) -> list[DistScenario]:
    """Each rank overflowing in turn, in the first and in the last rank's shard, between clean steps
    that grow the scale every step."""
    last = world_size - 1
    steps = [RankPoison(None, 0, INF)]
    for r in range(world_size):
        steps += [RankPoison(r, 0, INF), RankPoison(None, 0, INF), RankPoison(r, WIDTH - 1, NAN)]
    return [
        DistScenario(ScalerConfig(2.0**10, 2.0, 0.5, 1), tuple(steps)),
        DistScenario(ScalerConfig(1.0, 4.0, 0.25, 2), (RankPoison(last, 0, -INF), RankPoison(None, 1, INF))),
    ]


def draw_scenarios(world_size: int, smoke: bool) -> list[DistScenario]:
    """The current hypothesis profile's max_examples scenarios (derandomized under the ci profile); a
    quarter of them in the CPU smoke pass, where each one in every setup is most of the launch's work."""
    drawn: list[DistScenario] = []
    count = settings().max_examples

    @settings(max_examples=max(1, count // 4) if smoke else count, database=None, phases=[Phase.generate],
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(S.dist_scenarios(world_size, WIDTH))
    def collect(scenario: DistScenario) -> None:
        drawn.append(scenario)

    collect()
    return drawn


@pytest.fixture(scope="module")
def scaling_run(pytestconfig, perf_settings, perf_world_size, perf_device, tmp_path_factory):
    """(scenarios, launch result, output folder) of the one launch that runs every scenario in every setup."""
    scenarios = explicit_scenarios(perf_world_size) + draw_scenarios(perf_world_size, perf_device.type != "cuda")
    out = tmp_path_factory.mktemp("dist-scaling")
    path = out / "scenarios.json"
    path.write_text(json.dumps([s.to_json() for s in scenarios]))
    args = ["--scenarios", str(path), "--out", str(out), "--device", perf_device.type]
    per_node = perf_settings.nodes.per_node(perf_world_size)
    result = launcher_of(pytestconfig).run("ampbench.distributed.loss_scaling_worker", args, per_node,
                                           LAUNCH_SECONDS[perf_device.type], out, ship=(path,),
                                           what=f"loss scaling across ranks, {len(scenarios)} scenarios")
    return scenarios, result, out


def _step_problem(k: int, recs: list[dict], overflow: bool, expected: tuple[float, int]) -> str | None:
    moved = [r["moved"] for r in recs]
    if overflow and any(moved):
        return f"step {k} overflowed on one rank, yet ranks {[i for i, m in enumerate(moved) if m]} stepped"
    if not overflow and not all(moved):
        return f"clean step {k}, yet ranks {[i for i, m in enumerate(moved) if not m]} skipped"
    states = [(r["scale"], r["tracker"]) for r in recs]
    if len(set(states)) > 1:
        return f"after step {k} ranks hold different (scale, tracker): {states}"
    if states[0] != expected:
        return f"after step {k} (scale, tracker) {states[0]}, reference trajectory {expected}"
    digests = [r["full_digest"] for r in recs]
    if len(set(digests)) > 1:
        return f"after step {k} ranks hold different weights (digests {digests})"
    return None


@pytest.mark.parametrize("setup", list(SETUPS))
def test_one_rank_overflow_skips_on_every_rank(setup: str, scaling_run, perf_world_size, perf_settings):
    scenarios, result, out = scaling_run
    paths = [out / setup / f"rank{r}.json" for r in range(perf_world_size)]
    if not all(p.exists() for p in paths):
        pytest.fail(f"loss scaling across ranks, setup {setup}: no result from every rank; torchrun launch "
                    f"{result.explain(perf_settings.nodes.per_node(perf_world_size))}", pytrace=False)
    per_rank = [json.loads(p.read_text())["results"] for p in paths]
    assert all(len(r) == len(scenarios) for r in per_rank), (f"{setup}: ranks returned {[len(r) for r in per_rank]} "
                                                             "scenarios")

    failures, lone_overflows = [], 0
    for i, scenario in enumerate(scenarios):
        overflows = [s.rank is not None for s in scenario.steps]
        expected = expected_trajectory(scenario.cfg, overflows)
        for k, overflow in enumerate(overflows):
            recs = [r[i][k] for r in per_rank]
            lone_overflows += overflow and sum(r["local_overflow"] for r in recs) == 1
            problem = _step_problem(k, recs, overflow, expected[k])
            if problem:
                failures.append(f"scenario {i} {json.dumps(scenario.to_json())}: {problem}")
                break
    if not SETUPS[setup].agrees:
        assert failures, f"{setup}: ranks that never communicate passed every scenario; the properties have no teeth"
        return
    assert not failures, (f"{setup}: {len(failures)} of {len(scenarios)} scenarios break loss scaling across "
                          f"{perf_world_size} ranks:\n" + "\n".join(failures[:5]))
    if SETUPS[setup].sharded:
        # otherwise the test would not exercise what makes sharded scaling hard
        assert lone_overflows > 0, f"{setup}: no poisoned step reached only one rank's shard"
