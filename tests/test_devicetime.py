"""Device time on the CPU: kernel names as baselines keep them, kernel lists, how each side's clock
is chosen and paired, the host load of a step, kernel changes against a baseline, the first look at
an ungated figure and the order of a paired timer's blocks. Graph capture and the profiler need CUDA;
what is tested here is everything around them."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from ampbench.kernel_diff import kernel_changes
from ampbench.results.ratios import DEVICE
from ampbench.speed.clocks import METHODS, Clock, DeviceClock, clock_for, paired_blocks
from ampbench.speed.devicetime import MAX_KERNELS, REST, TOP_KERNELS, KernelProfile, _union_ns, normalise_kernel_name
from ampbench.speed.hostload import HOST_BOUND_IDLE_SHARE, host_load
from ampbench.speed.ratio import Ratio
from ampbench.speed.sides import SpeedPolicy, policy_for
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import SpeedupCheck, Verdict

# ---------------------------------------------------------------------------------------------------
# kernel names

MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor"
       "<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
SM90 = ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
        "__5x_cublas")


@pytest.mark.parametrize("raw, short", [
    (MUL, "at::native::vectorized_elementwise_kernel"),
    (SM90, SM90),  # a library kernel's name is its algorithm, tile shape included
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD"),
    ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD"),
    ("Memset (Device)", "Memset"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     "at::native::cunn_SoftMaxForward"),
    ("void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(at::Scalar const&, "
     "at::Tensor&)::{lambda()#1}::operator()() const::{lambda(long)#1}>(int, long*)", "elementwise_kernel_with_index"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
     "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"),
    ("triton_per_fused_native_layer_norm_0", "triton_per_fused_native_layer_norm_0"),
])
def test_a_kernel_name_keeps_what_stays_from_run_to_run(raw, short):
    assert normalise_kernel_name(raw) == short
    assert normalise_kernel_name(short) == short  # a normalised name is its own normal form


def test_kernels_that_differ_only_in_template_arguments_share_a_name():
    half = MUL.replace("float", "c10::Half")
    assert normalise_kernel_name(half) == normalise_kernel_name(MUL)
    # two CUTLASS algorithms stay two lines: a regression may be the switch from one to the other
    a = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(x::Params)"
    b = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x64_32x3_nn_align4>(x::Params)"
    assert normalise_kernel_name(a) != normalise_kernel_name(b)


# ---------------------------------------------------------------------------------------------------
# the device's busy time and the kernel list


@pytest.mark.parametrize("intervals, busy", [
    ([], 0),
    ([(0, 10)], 10),
    ([(0, 10), (20, 25)], 15),  # apart
    ([(0, 10), (5, 15)], 15),  # overlapping
    ([(0, 30), (5, 10), (12, 20)], 30),  # nested
    ([(0, 10), (10, 20)], 20),  # touching
    ([(20, 25), (0, 10), (8, 12)], 17),  # unsorted
])
def test_union_of_intervals(intervals, busy):
    assert _union_ns(intervals) == busy


def test_a_kernel_list_keeps_the_largest_and_sums_the_rest():
    # 1000 ms of kernels: past the 2 largest, only kernels of at least KEPT_SHARE (2.5 ms) keep their name
    profile = KernelProfile(3, 1000.0, 990.0, (("gemm", 900.0), ("relu", 90.0), ("copy", 2.5), ("fill", 2.0),
                                               ("add", 1.0)))
    assert profile.top(2) == [{"name": "gemm", "ms": 900.0}, {"name": "relu", "ms": 90.0},
                              {"name": "copy", "ms": 2.5}, {"name": REST, "ms": 3.0}]
    assert profile.top(5) == profile.top(10) == [{"name": k, "ms": ms} for k, ms in profile.kernels]  # no rest line
    assert KernelProfile(1, 0.1, 0.1, (("k", 0.123456789),)).top() == [{"name": "k", "ms": 0.12346}]


def test_a_new_kernel_big_enough_to_fail_a_cell_keeps_its_name_past_the_largest():
    """A spin of 1.5% of a step with many larger kernels (a GPT step) is named, not summed away."""
    big = tuple((f"gemm{i}", 50.0) for i in range(TOP_KERNELS + 5))
    kernels = big + (("spin_kernel", 20.0),) + tuple((f"small{i}", 0.1) for i in range(100))
    profile = KernelProfile(1, sum(ms for _, ms in kernels), 1300.0, kernels)
    names = [k["name"] for k in profile.top()]
    assert "spin_kernel" in names and names[-1] == REST and len(names) == len(big) + 2
    many = KernelProfile(1, 100.0 * (MAX_KERNELS + 10), 1.0, tuple((f"k{i}", 100.0) for i in range(MAX_KERNELS + 10)))
    assert len(many.top()) == MAX_KERNELS + 1  # at most MAX_KERNELS by name, and the rest line


# ---------------------------------------------------------------------------------------------------
# each side's clock, and the pair


class FakeTrainer:
    """Counts the training steps a clock asks for."""

    def __init__(self, device: str = "cpu"):
        self.device = torch.device(device)
        self.steps = 0

    def run(self, steps: int) -> None:
        self.steps += steps


def test_off_cuda_device_time_is_the_wall_time():
    trainer = FakeTrainer("cpu")
    clock = clock_for(trainer, 4, graph=None, fallback=None)
    assert clock.method == "wall" and "no CUDA device" in clock.fallback
    seconds = clock.block()
    assert trainer.steps == 4 and seconds >= 0.0


def test_on_cuda_a_captured_step_is_replayed_and_a_failed_capture_falls_back_to_the_kernel_sum():
    trainer, graph = FakeTrainer("cuda"), object()
    replayed = clock_for(trainer, 4, graph, None)
    assert (replayed.method, replayed.graph, replayed.fallback) == ("graph", graph, None)
    profiled = clock_for(trainer, 4, None, "CUDA graph capture failed: RuntimeError: x")
    assert profiled.method == "kernels" and profiled.fallback.startswith("CUDA graph capture failed")


def test_a_device_clock_checks_its_method():
    assert METHODS == ("graph", "kernels", "wall")
    with pytest.raises(ValueError, match="unknown device-time method 'events'; one of graph, kernels, wall"):
        DeviceClock(FakeTrainer(), "events", 1)
    with pytest.raises(ValueError, match="method 'graph' needs a captured step"):
        DeviceClock(FakeTrainer("cuda"), "graph", 1)


def test_two_sides_measured_the_same_way_keep_their_own_clocks():
    ref = DeviceClock(FakeTrainer("cuda"), "graph", 2, object())
    mode = DeviceClock(FakeTrainer("cuda"), "graph", 5, object())
    ref_block, mode_block, method, fallback = paired_blocks(ref, mode)
    assert (ref_block, mode_block, method, fallback) == (ref.block, mode.block, "graph", None)
    cpu = clock_for(FakeTrainer(), 1, None, None)
    assert paired_blocks(cpu, clock_for(FakeTrainer(), 1, None, None))[2:] == ("wall", cpu.fallback)


@pytest.mark.parametrize("ref_graph, mode_graph", [(True, False), (False, True)])
def test_a_side_without_a_graph_makes_both_sides_sum_kernels_and_says_why(ref_graph, mode_graph, monkeypatch):
    import ampbench.speed.clocks as clocks

    profiled = []
    monkeypatch.setattr(clocks, "profile_steps", lambda trainer, steps,
                        queue=None: profiled.append((trainer, steps)) or
                        KernelProfile(steps, 2.0, 1.5, ()))
    ref_t, mode_t = FakeTrainer("cuda"), FakeTrainer("cuda")
    ref = clock_for(ref_t, 2, object() if ref_graph else None, None if ref_graph else "capture failed: ref")
    mode = clock_for(mode_t, 5, object() if mode_graph else None, None if mode_graph else "capture failed: mode")
    ref_block, mode_block, method, fallback = paired_blocks(ref, mode)
    assert method == "kernels" and fallback == ("capture failed: mode" if ref_graph else "capture failed: ref")
    assert ref_block() == mode_block() == pytest.approx(2.0e-3)  # kernel ms per step, in seconds
    assert profiled == [(ref_t, 2), (mode_t, 5)]  # each side profiles its own trainer, its own block length


# ---------------------------------------------------------------------------------------------------
# how far a step waits on the host


def test_host_load_of_a_step_the_device_keeps_up_with():
    load = host_load(busy_seconds=0.0095, wall_seconds=0.010)
    assert load.busy_ms == pytest.approx(9.5) and load.wall_ms == pytest.approx(10.0)
    assert load.overhead_ms == pytest.approx(0.5) and load.idle_share == pytest.approx(0.05) and not load.host_bound


def test_host_load_of_a_step_that_waits_on_the_host():
    load = host_load(0.006, 0.010)
    assert load.overhead_ms == pytest.approx(4.0) and load.idle_share == pytest.approx(0.4) and load.host_bound


def test_host_bound_means_more_than_the_threshold():
    assert HOST_BOUND_IDLE_SHARE == 0.10
    assert not host_load(9.0, 10.0).host_bound  # exactly 10% idle
    assert host_load(8.9, 10.0).host_bound


def test_host_load_never_goes_negative_and_survives_a_zero_wall_time():
    # the profiler's busy time can exceed a wall time measured in another block
    load = host_load(0.012, 0.010)
    assert load.overhead_ms == 0.0 and load.idle_share == 0.0 and not load.host_bound
    assert host_load(0.0, 0.0).idle_share == 0.0


# ---------------------------------------------------------------------------------------------------
# kernel changes against a baseline


def _kernels(**ms):
    return [{"name": name, "ms": value} for name, value in ms.items()]


def test_kernel_changes_name_the_changed_the_new_and_the_vanished():
    text = kernel_changes(_kernels(gemm=2.0, relu=0.5, old_copy=0.25), _kernels(gemm=2.5, relu=0.5, new_cast=0.125))
    assert text.startswith("kernels per step +0.375 ms against the baseline; ")
    assert "changed: gemm 2.000->2.500 ms (+0.500)" in text
    assert "new: new_cast 0.125 ms" in text and "vanished: old_copy 0.250 ms" in text
    assert "relu" not in text  # unchanged


def test_kernel_changes_rank_by_the_size_of_the_move_and_keep_the_top():
    base = _kernels(**{f"k{i}": 1.0 for i in range(8)})
    new = _kernels(**{f"k{i}": 1.0 + i / 10 for i in range(8)})
    changed = kernel_changes(base, new, top=3).split("changed: ")[1]
    assert [part.split()[0] for part in changed.split(", ")] == ["k7", "k6", "k5"]


@pytest.mark.parametrize("baseline, measured", [(None, _kernels(a=1.0)), (_kernels(a=1.0), None), ([], _kernels(a=1.0)),
                                                (_kernels(a=1.0), _kernels(a=1.0))])
def test_no_kernel_changes_without_both_lists_or_without_a_change(baseline, measured):
    assert kernel_changes(baseline, measured) is None


# ---------------------------------------------------------------------------------------------------
# the paired timer and the first look at an ungated figure


def _blocks(ref_seconds, mode_seconds, log=None):
    """Block callables returning the given seconds per step in turn, logging their order."""
    ref_it, mode_it = itertools.cycle(ref_seconds), itertools.cycle(mode_seconds)

    def ref():
        if log is not None:
            log.append("ref")
        return next(ref_it)

    def mode():
        if log is not None:
            log.append("mode")
        return next(mode_it)

    return ref, mode


def test_paired_timer_puts_the_side_it_is_over_first_in_even_rounds_and_the_mode_first_in_odd_ones():
    log: list[str] = []
    timer = PairedTimer(*_blocks([2.0], [1.0], log), ref_steps=1, mode_steps=2)
    timer.rounds(3)
    assert log == ["ref", "mode", "mode", "ref", "ref", "mode"]
    timer.rounds(1)  # a later batch goes on with the order where the last one left it
    assert log[6:] == ["mode", "ref"]
    assert timer.ref_times == [2.0] * 4 and timer.mode_times == [1.0] * 4


def _policy() -> SpeedPolicy:
    return SpeedPolicy(0, 0.0, 0.01, RoundsPolicy(12, 20, 0.005, 5.0), RoundsPolicy(8, 8, 1.0, 5.0), 48)


def _timer() -> PairedTimer:
    return PairedTimer(*_blocks([2.00, 2.02, 1.98, 2.01], [1.00, 1.01, 0.99, 1.02, 0.98]), 1, 1)


def first_look(check: SpeedupCheck | None, timer: PairedTimer, policy: SpeedPolicy) -> Ratio:
    """A ratio timed by `timer` that does not gate its cell: its first look."""
    return Ratio(DEVICE, check=check, clock=Clock(lambda _: timer)).time(policy, gated=False)


@pytest.mark.parametrize("confidence, rounds", [(0.95, 6), (0.99, 8)])
def test_first_look_takes_the_fewest_rounds_of_its_confidence_and_no_baseline(confidence, rounds):
    timer = _timer()
    outcome = first_look(None, timer, replace(_policy(), look_confidence=confidence))
    assert len(timer.mode_times) == rounds and outcome.estimate.rounds == rounds
    assert outcome.estimate.confidence == confidence
    assert outcome.verdict is Verdict.NO_BASELINE and outcome.confirmation is None
    assert outcome.estimate.speedup == pytest.approx(2.0, rel=0.03) and "no baseline for this GPU" in outcome.judgement


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_reported_figure_looks_at_95_percent_but_a_recording_keeps_99(device):
    # a recording's first look sets the entry's stored noise, which tolerances read as a 99% half-width
    assert policy_for(torch.device(device), 8, 0.01).look_confidence == 0.95
    assert policy_for(torch.device(device), 8, 0.01, recording=True).look_confidence == 0.99


def test_first_look_classifies_without_extending_or_confirming():
    # a pass stops after 4 rounds, all of them above the line; anything else takes the 95% interval's 6
    for expected, verdict, rounds in ((2.0, Verdict.PASS, 4), (3.0, Verdict.REGRESSION, 6), (1.0, Verdict.IMPROVED, 6)):
        timer = _timer()
        check = SpeedupCheck("gpt", "amp_bf16", expected, 0.05)
        outcome = first_look(check, timer, _policy())
        assert outcome.verdict is verdict and outcome.confirmation is None, expected
        assert len(timer.mode_times) == rounds and outcome.judgement.startswith("gpt amp_bf16: speedup over fp32")
    # a check with no line decides nothing at any size: its first look's 4 rounds are all it takes
    timer = _timer()
    outcome = first_look(SpeedupCheck("gpt", "amp_bf16", 2.0, 1.5), timer, _policy())
    assert outcome.verdict is Verdict.INCONCLUSIVE and len(timer.mode_times) == 4


def test_first_look_adds_no_rounds_to_a_timer_that_has_enough():
    timer = _timer()
    timer.rounds(10)
    outcome = first_look(None, timer, _policy())
    assert len(timer.mode_times) == 10 and isinstance(outcome.estimate, SpeedupEstimate)


def test_kernel_changes_lead_with_the_largest_move_and_read_older_names_alike():
    base = [{"name": "at::native::::multi_tensor_apply_kernel", "ms": 0.6}, {"name": "gemm", "ms": 1.0}]
    new = [{"name": "at::native::multi_tensor_apply_kernel", "ms": 0.6}, {"name": "gemm", "ms": 1.001},
           {"name": "at::cuda::spin_kernel", "ms": 0.013}]
    text = kernel_changes(base, new)
    assert text.index("new: at::cuda::spin_kernel") < text.index("changed: gemm")
    assert "multi_tensor_apply_kernel" not in text  # the same kernel under an older normaliser's name
    # a kernel that moved more leads, new or not
    text = kernel_changes(base, [*new[:1], {"name": "gemm", "ms": 1.2}, new[2]])
    assert text.index("changed: gemm") < text.index("new: at::cuda::spin_kernel")


def test_a_kernel_under_an_older_shorter_lists_cut_is_unknown_not_new():
    """gpt amp_fp16 on an H100 against a file that kept 20 kernels (the least 0.558 ms): five kernels of
    0.18-0.53 ms read as new, and the 0.157 ms spin kernel really added went unnamed."""
    old = _kernels(gemm=2.0, softmax=0.558, **{"(other kernels)": 3.5})
    new = _kernels(gemm=2.0, softmax=0.558, layer_norm=0.53, spin=0.157, **{"(other kernels)": 2.0})
    text = kernel_changes(old, new)
    assert "new:" not in text and "(other kernels)" not in text.split("; ", 1)[1]
    assert "not in the baseline's shorter list (its least kernel 0.558 ms): layer_norm 0.530 ms, spin 0.157 ms" in text
    # against a list cut lower (today's: every kernel of 0.25% of the step), the spin is new and leads
    today = _kernels(gemm=2.0, softmax=0.558, layer_norm=0.53, relu=0.1, **{"(other kernels)": 1.4})
    new = _kernels(gemm=2.0, softmax=0.558, layer_norm=0.53, relu=0.1, spin=0.157, **{"(other kernels)": 1.4})
    text = kernel_changes(today, new)
    assert text.split("; ")[1] == "new: spin 0.157 ms" and "layer_norm" not in text
    # a kernel a cut list does not name but was larger than its cut did vanish
    assert "vanished: layer_norm 0.530 ms" in kernel_changes(today,
                                                             _kernels(gemm=2.0, softmax=0.558,
                                                                      relu=0.1, **{"(other kernels)": 1.4}))


def test_kernel_changes_match_a_wrapper_kept_whole_to_its_short_form_in_an_older_list():
    old = [{"name": "cutlass::Kernel2", "ms": 0.5}, {"name": "gemm", "ms": 1.0}]
    new = [{"name": "cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_128x2_tn_align8>", "ms": 0.75},
           {"name": "gemm", "ms": 1.0}]
    text = kernel_changes(old, new)
    assert "new:" not in text and "vanished:" not in text
    assert "cutlass::Kernel2 0.500->0.750 ms (+0.250)" in text
    # where both lists name the wrapper in full, a changed choice of algorithm stays visible
    other = [{"name": "cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_64x2_tn_align8>", "ms": 0.75}]
    both = kernel_changes([dict(new[0])], other)
    assert "new: cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_64x2_tn_align8>" in both and "vanished:" in both
