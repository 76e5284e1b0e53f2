"""--perf-time-budget and the model of the main job's time, on fake step times: the budget stops a judged
ratio's looks undecided (inconclusive, saying so) and never makes a pass of one, a cell whose fewest
rounds no longer fit is not run, and the model's seconds follow the policy's phases and a slower card's
longer steps."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ampbench.gate.judge import BUDGET_CUT
from ampbench.speed import jobtime, sequential
from ampbench.speed.sides import policy_for
from ampbench.verdict import Verdict
from test_verdict import ABOVE, BELOW, CHECK, POLICY, judge, rounds_of

SPENT = replace(POLICY, deadline=0.0)  # time.monotonic() is past it from the start


def test_a_straddling_ratio_out_of_time_stops_at_its_first_look_inconclusive_and_says_so():
    timer = rounds_of(1.85, *ABOVE)  # with time, a pass at 12 rounds (test_verdict)
    out = judge(CHECK, timer, SPENT)
    assert len(timer.mode_times) == 5
    assert out.verdict is Verdict.INCONCLUSIVE and BUDGET_CUT in out.judgement
    assert out.measurement.cut_short


def test_a_pass_at_the_first_look_is_the_looks_not_the_budgets():
    out = judge(CHECK, rounds_of(*ABOVE), SPENT)
    assert out.verdict is Verdict.PASS and BUDGET_CUT not in out.judgement


def test_a_regression_without_time_to_confirm_it_is_inconclusive():
    timer = rounds_of(*BELOW)
    out = judge(CHECK, timer, SPENT)  # a confirming clock asked for would fail the test
    assert out.verdict is Verdict.INCONCLUSIVE and BUDGET_CUT in out.judgement


class _Clock:
    """time.monotonic advanced one second by each round of the mode."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("deadline", [0.0, 5.0, 7.0, 9.0, 13.0, 30.0])
def test_the_budget_never_makes_a_pass_the_unbudgeted_run_would_not(monkeypatch, deadline):
    clock = _Clock()
    monkeypatch.setattr(sequential.time, "monotonic", clock)
    series = [ABOVE, BELOW, (1.85, *ABOVE), (1.85, 1.95, 1.95, 1.85) * 6, (1.95, 1.85) * 12,
              (1.8, 1.95, 1.95, 1.95, 1.95, 1.95) * 4]
    for ratios in series:
        def ticking(values):
            timer = rounds_of(*values)
            mode = timer.mode

            def step():
                clock.now += 1.0
                return mode()
            timer.mode = step
            return timer

        clock.now = 0.0
        free = judge(CHECK, ticking(ratios), POLICY, ticking(ratios)).verdict
        clock.now = 0.0
        budgeted = judge(CHECK, ticking(ratios), replace(POLICY, deadline=deadline), ticking(ratios))
        if budgeted.verdict in (Verdict.PASS, Verdict.IMPROVED):
            assert free is budgeted.verdict and BUDGET_CUT not in budgeted.judgement, (ratios, deadline)
        if budgeted.measurement.cut_short:
            assert budgeted.verdict is Verdict.INCONCLUSIVE, (ratios, deadline)


# -- the model ---------------------------------------------------------------------------------------


def _cuda_policy():
    import torch

    return policy_for(torch.device("cuda"), 5, 0.005)


def test_a_block_holds_whole_steps_at_least_one():
    assert jobtime.block_s(0.2, 0.1) == pytest.approx(0.2)  # a long step: one step a block
    assert jobtime.block_s(0.015, 0.1) == pytest.approx(7 * 0.015)
    assert jobtime.block_s(0.0001, 0.1) == pytest.approx(64 * 0.0001)  # at most 64 steps


def test_a_cells_fewest_seconds_are_its_phases_at_their_fewest_rounds():
    policy = _cuda_policy()
    cell = jobtime.CellSteps("gpt amp_bf16", fp32_step_s=0.2, mode_step_s=0.1, builds_fp32=False)
    time_ = jobtime.cell_time(cell, policy)
    device = 5 * (0.2 + 0.1)  # the first look's 5 rounds of one-step blocks
    wall = 4 * (0.2 + 0.1)  # the reported figure's look, half-length blocks still one step
    assert time_.fewest_s == pytest.approx(jobtime.prepare_s(0.1, policy) + device + wall + 0.1)
    assert time_.most_s > time_.fewest_s
    unjudged = jobtime.cell_time(replace(cell, judged=False), policy)
    assert unjudged.fewest_s == pytest.approx(time_.fewest_s + 3 * 0.3 + 2 * 0.3)  # 8 and 6 rounds


def test_a_slower_card_lengthens_long_steps_rounds_in_proportion_and_short_ones_less():
    policy = _cuda_policy()
    slow = [jobtime.CellSteps("resnet50 amp_bf16", 0.16, 0.03)]
    fast = [jobtime.CellSteps("mlp amp_bf16", 0.0005, 0.0002)]
    here, t4 = jobtime.estimate(slow, policy), jobtime.estimate(slow, policy, slowdown=15)
    assert 10 < t4.fewest_s / here.fewest_s <= 15
    here, t4 = jobtime.estimate(fast, policy), jobtime.estimate(fast, policy, slowdown=15)
    assert t4.fewest_s / here.fewest_s < 5  # fixed-length blocks and warm-up absorb most of it
    with pytest.raises(ValueError, match="positive"):
        jobtime.estimate(slow, policy, slowdown=0)


def test_a_cell_whose_fewest_rounds_do_not_fit_is_not_run_and_never_passes():
    policy = _cuda_policy()
    cell = jobtime.CellSteps("gpt amp_bf16", 0.2, 0.1, builds_fp32=False)
    assert jobtime.out_of_budget(cell, policy, None) is None
    assert jobtime.out_of_budget(cell, policy, time.monotonic() + 3600) is None
    why = jobtime.out_of_budget(cell, policy, time.monotonic() + 1.0)
    assert why is not None and why.startswith("gpt amp_bf16 not run: --perf-time-budget has")
    assert "not a pass" in why


def test_the_job_sums_its_cells():
    policy = _cuda_policy()
    cells = [jobtime.CellSteps(f"m{i}", 0.1 * i, 0.05 * i) for i in range(1, 4)]
    job = jobtime.estimate(cells, policy, slowdown=2)
    assert job.fewest_s == pytest.approx(sum(jobtime.cell_time(c, policy, 2).fewest_s for c in cells))
    assert [c.name for c in job.cells] == ["m1", "m2", "m3"] and job.slowdown == 2


def test_the_summary_models_a_real_h100_runs_speed_cells():
    from pathlib import Path

    from ampbench.results.run import load_run

    run = load_run(Path(__file__).parent / "data" / "h100_speed_device.json")
    cells = jobtime.cells_of_records(run.cells)
    assert cells and all(c.fp32_step_s > 0 and c.mode_step_s > 0 for c in cells)
    assert sum(c.builds_fp32 for c in cells) == len({c.name.split()[0] for c in cells})  # one fp32 side a model
    line = jobtime.summary_line(run.cells, _cuda_policy())
    assert line is not None and f"{len(cells)} speed cells" in line and "15x slower" in line
    assert "modelled, not measured" in line
    assert jobtime.summary_line([], _cuda_policy()) is None


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_a_cell_the_budget_leaves_unrun_skips_saying_so_and_fails_under_strict(tmp_path, strict):
    """The suite's own cells of every kind, on the CPU, under a budget spent before they start: skipped as not
    run, never a pass; under --perf-strict failures, as an inconclusive verdict is there."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n')
    (tmp_path / "test_cells.py").write_text("from ampbench.suite import *  # noqa: F403\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rsf", "--perf-device", "cpu",
                          "--perf-models", "mlp", "--perf-precisions", "bf16", "--perf-history", "off",
                          "--perf-time-budget", "1e-9", "-k", "test_speed or test_memory",
                          *(["--perf-strict"] if strict else [])],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    for test in ("test_speed", "test_memory"):
        assert f"{test}[mlp-bf16] not run: --perf-time-budget is spent (not a pass: no verdict)" in out, out
    if strict:
        assert run.returncode == 1 and "(--perf-strict)" in out and "skipped" not in out, out
    else:
        assert run.returncode == 0 and "2 skipped" in out and "passed" not in out, out
