"""A compiled speed cell measures one compiled graph of the step: a graph break while it compiled or a
recompile while it was timed fails it, with the reason; an eager cell is never held to that."""

from __future__ import annotations

import torch

from ampbench.baselines.entries import SpeedEntry
from ampbench.modes import compiled, get_mode, label
from ampbench.speed.compiled import DynamoState, compile_problems

AMP_BF16 = get_mode("amp_bf16")


def _state(graphs: int, **breaks: int) -> DynamoState:
    return DynamoState(graphs, {reason.replace("_", " "): n for reason, n in breaks.items()})


def test_a_clean_compile_has_no_problem_and_an_eager_cell_is_never_held_to_one():
    mode = compiled(AMP_BF16)
    assert compile_problems(mode, _state(0), _state(2), _state(2)) == []
    assert compile_problems(AMP_BF16, _state(0, data_dependent=1), _state(5, data_dependent=3), _state(9)) == []


def test_a_graph_break_while_compiling_names_its_reasons_and_counts():
    [problem] = compile_problems(compiled(AMP_BF16), _state(0, old=1), _state(3, old=1, data_dependent=2), _state(3))
    assert "broke the step's graph" in problem and "data dependent (x2)" in problem and "old" not in problem


def test_a_recompile_while_timed_says_how_many_graphs():
    [problem] = compile_problems(compiled(AMP_BF16), _state(0), _state(2), _state(4))
    assert "compiled 2 new graph(s) while the cell was timed" in problem


def test_the_counts_are_dynamos_own():
    before = DynamoState.now()

    def step(x):
        return (x * 2).sum()

    torch.compile(step, backend="eager")(torch.ones(3))
    after = DynamoState.now()
    assert after.graphs > before.graphs


def test_a_compiled_cell_names_itself_and_a_row_that_always_compiles_keeps_its_name():
    assert label(compiled(AMP_BF16)) == "amp_bf16 compiled" and label(AMP_BF16) == "amp_bf16"
    assert label(get_mode("fp8_rowwise")) == "fp8_rowwise"


def test_compile_time_is_held_loosely_against_its_baseline():
    from ampbench.speed.compiled import COMPILE_TIME_TOLERANCE, compile_time_check

    assert compile_time_check("gpt", "amp_bf16 compiled", SpeedEntry.from_figures({"compile_s": 30.0}),
                              30.0 * (1 + COMPILE_TIME_TOLERANCE)) is None
    failure = compile_time_check("gpt", "amp_bf16 compiled", SpeedEntry.from_figures({"compile_s": 30.0}), 105.0)
    assert "gpt amp_bf16 compiled: compile time (s, caches cold) 105 against baseline 30 (+250.0%)" in failure
    # nothing to hold it to: an eager cell, or an entry recorded before compile time was
    assert compile_time_check("gpt", "amp_bf16", SpeedEntry.from_figures({"compile_s": 30.0}), None) is None
    assert compile_time_check("gpt", "amp_bf16 compiled", SpeedEntry.from_figures({"speedup": 2.0}), 75.0) is None
    assert compile_time_check("gpt", "amp_bf16 compiled", None, 75.0) is None
