"""The optimized HLO's collectives and Pallas calls (crosstune.planner.hlo), on lines in XLA:TPU's own format (copied
from a v5p compile of the tiny Gemma 4 step, shapes kept), and the three-term roofline built from them."""

from __future__ import annotations

import pytest

from crosstune.hardware import CHIPS
from crosstune.planner.aot_report import CompiledStep, roofline
from crosstune.planner.hlo import group_size, parse_collectives

# ruff: noqa: E501 (HLO lines are kept whole, as XLA prints them)

HLO = """\
HloModule jit_crosstune_train_step, entry_computation_layout={()->()}

%body.1 (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %all-reduce.9 = f32[1024]{0:T(1024)} all-reduce(%x), channel_id=9, replica_groups=[2,2]<=[4], to_apply=%add
}

ENTRY %main.1 (param.1: bf16[1024,1024]) -> bf16[1024,1024] {
  %all-reduce.69 = f32[32,8,128]{2,1,0:T(8,128)} all-reduce(%bitcast.208), channel_id=41, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=%add.11.clone
  %all-reduce.77 = (f32[4,128,32]{1,2,0:T(8,128)}, f32[32]{0:T(128)}) all-reduce(%a, %b), channel_id=18, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=%add.1.clone
  %all-gather.25 = bf16[4,128,1,2,32]{1,4,3,2,0:T(8,128)(2,1)} all-gather(%bitcast.656), channel_id=149, replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=2,'axis_3'=1] {'axis_0'}, dimensions={0}
  %all-to-all.12 = f32[2,2,128,32]{2,3,1,0:T(8,128)} all-to-all(%broadcast.390), channel_id=106, replica_groups={{0,1},{2,3}}, dimensions={0}
  %reduce-scatter.1 = bf16[512,1024]{1,0} reduce-scatter(%y), channel_id=7, replica_groups={{0,1}}, dimensions={0}, to_apply=%add
  %collective-permute-start = (s32[2,128,1]{1,2,0:T(1,128)S(1)}, s32[2,128,1]{1,2,0:T(1,128)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%bitcast.724), channel_id=12, source_target_pairs={{0,0},{1,2},{2,1},{3,3}}
  %collective-permute-done = s32[2,128,1]{1,2,0} collective-permute-done(%collective-permute-start)
  %collective-permute-start.1 = (f32[32]{0:T(128)S(1)}, f32[32]{0:T(128)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%c), channel_id=20, source_target_pairs={{0,0},{1,1},{2,2},{3,3}}
  %while.3 = (s32[], f32[8]) while(%t), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"6"}}
  %splash_mha_fwd_segmented_residuals.2 = (f32[2,128,128]{2,1,0:T(8,128)}, f32[2,2,128,32]{3,2,1,0:T(8,128)}) custom-call(%copy.927, %copy.928), custom_call_target="tpu_custom_call", operand_layout_constraints={s8[1,1,1]{2,1,0}}, frontend_attributes={kernel_metadata={
"xprof_metadata":"{\"block_q\": 128, \"use_fused_bwd_kernel\": true}"
}}, metadata={op_name="jit(crosstune_train_step)/jvp(crosstune_attention_sliding)/shard_map/vmap(static_sparsity_splash)/pallas_call" stack_frame_id=88}
  %splash_mha_dkv_segmented_no_residuals.1 = (f32[2,128,32]{2,1,0:T(8,128)}) custom-call(%copy.933), custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={
"xprof_metadata":"{}"
}}, metadata={op_name="jit(crosstune_train_step)/transpose(jvp(crosstune_attention_global))/pallas_call"}
  %custom-call.3 = s32[1024]{0:T(1024)} custom-call(%param_1.10), custom_call_target="AssumeGatherIndicesInBound"
}
"""


def test_replica_group_formats():
    assert group_size("replica_groups={{0,2},{1,3}}, use_global", 4) == 2
    assert group_size("replica_groups=[2,2]<=[2,2]T(1,0), use", 4) == 2
    assert group_size("replica_groups=[1,4]<=[4], use", 4) == 4
    assert group_size("replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=2] {'axis_0','axis_2'}, x", 4) == 4
    assert group_size("channel_id=3, to_apply=%add", 8) == 8  # no groups: every device


def test_collective_bytes_per_device_follow_the_ring_algorithms():
    c = parse_collectives(HLO, devices=4)
    ar = 2 * (1 / 2) * 32 * 8 * 128 * 4 + 2 * (3 / 4) * (4 * 128 * 32 + 32) * 4 + 6 * 2 * (1 / 2) * 1024 * 4
    assert c.count == {"all-reduce": 8, "all-gather": 1, "all-to-all": 1, "reduce-scatter": 1, "collective-permute": 2}
    assert c.bytes["all-reduce"] == pytest.approx(ar)  # the loop body's all-reduce runs its 6 trips
    assert c.bytes["all-gather"] == pytest.approx((1 / 2) * 4 * 128 * 2 * 32 * 2)  # g=2 over axis_0
    assert c.bytes["all-to-all"] == pytest.approx((1 / 2) * 2 * 2 * 128 * 32 * 4)
    assert c.bytes["reduce-scatter"] == pytest.approx(1 * 512 * 1024 * 2)  # operand = 2 × the result
    # devices 1 and 2 swap their operand; the second permute only sends each device's data to itself
    assert c.bytes["collective-permute"] == pytest.approx(2 * 128 * 1 * 4)
    assert c.total_bytes == pytest.approx(sum(c.bytes.values()))
    assert c.custom_calls == {
        "splash_mha_fwd_segmented_residuals|crosstune_attention_sliding": 1,
        "splash_mha_dkv_segmented_no_residuals|crosstune_attention_global": 1,
    }
    assert c.uncounted_loops == 0


def test_the_roofline_has_an_interconnect_term():
    """compute, HBM and ICI per micro-step; the slowest sets the step and the tokens/s (v5p: 459 TFLOP/s, 2765 GB/s,
    1200 GB/s of ICI)."""
    step = CompiledStep(
        "v5p:2x2x1",
        "TPU v5",
        4,
        60,
        60,
        3072,
        8,
        1,
        1,
        0,
        1,
        0,
        flops=459e12 * 0.2,
        bytes_accessed=2765e9 * 0.1,
        build_s=0,
        lower_s=0,
        compile_s=0,
        host_peak_rss_bytes=0,
        collective_bytes=1200e9 * 0.3,
        kernel_flops=459e12 * 0.05,
    )
    line = roofline(step, CHIPS["tpu-v5p"])
    assert (line.compute_s, line.memory_s, line.ici_s) == pytest.approx((0.25, 0.1, 0.3))
    assert line.bound == "ICI" and line.micro_step_s == pytest.approx(0.3)
    assert line.tokens_per_s == pytest.approx(3072 / 0.3) and line.step_s == pytest.approx(8 * 0.3)
    assert line.tokens_per_s_of(line.compute_s) == pytest.approx(3072 / 0.25)
    old = CompiledStep.from_dict({**step.__dict__, "collective_bytes": 0.0})
    assert roofline(old, CHIPS["tpu-v5p"]).bound == "compute"
