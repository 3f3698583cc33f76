"""A while loop's work counted for every run (crosstune.planner.loops, crosstune.planner.hlo.while_loops): trip counts
read from XLA:TPU's optimized HLO, which prints none (lines as libtpu 0.0.42 printed a lax.scan's loop, trimmed),
nested loops' runs multiplied, and on this CPU a scan of matmuls costed as the same matmuls unrolled."""

from __future__ import annotations

import re

import pytest

from crosstune.hardware import CHIPS
from crosstune.planner.aot_report import CompiledStep, roofline
from crosstune.planner.hlo import parse_collectives, times_run, while_loops
from crosstune.planner.loops import body_module, loop_work

# ruff: noqa: E501 (HLO lines are kept whole, as XLA prints them)

SCAN = """\
HloModule jit_scanned, is_scheduled=true, entry_computation_layout={{(bf16[256,512]{{1,0:T(8,128)(2,1)}})->bf16[256,512]{{1,0:T(8,128)(2,1)}}}}

%wide.region_0.4.clone.sunk (wide.arg_tuple.6: (s32[], bf16[256,512])) -> (s32[], bf16[256,512]) {{
  %constant.81..sunk.1 = s32[]{{:T(128)}} constant({step})
  %wide.arg_tuple.6 = (s32[]{{:T(128)}}, bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}}) parameter(0)
  %get-tuple-element.270 = s32[]{{:T(128)}} get-tuple-element(%wide.arg_tuple.6), index=0
  %copy.456 = s32[]{{:T(128)S(6)}} copy(%get-tuple-element.270), backend_config={{"flag_configs":[],"scoped_memory_configs":[]}}
  %get-tuple-element.271 = bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}} get-tuple-element(%wide.arg_tuple.6), index=1
  %all-reduce.9 = bf16[256,512]{{1,0:T(8,128)(2,1)}} all-reduce(%get-tuple-element.271), channel_id=9, replica_groups=[2,2]<=[4], to_apply=%add
  %add.19 = s32[]{{:T(128)}} add(%copy.456, %constant.81..sunk.1), metadata={{op_name="jit(scanned)/jvp()/while/body/add" stack_frame_id=4}}
  ROOT %tuple.48 = (s32[]{{:T(128)}}, bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}}) tuple(%add.19, %all-reduce.9)
}}

%wide.region_1.5.clone (wide.arg_tuple.3: (s32[], bf16[256,512])) -> pred[] {{
  %constant.91 = s32[]{{:T(128)}} constant(8)
  %wide.arg_tuple.3 = (s32[]{{:T(128)}}, bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}}) parameter(0)
  %get-tuple-element.219 = s32[]{{:T(128)}} get-tuple-element(%wide.arg_tuple.3), index=0
  ROOT %lt.8 = pred[]{{:T(512)}} compare(%get-tuple-element.219, %constant.91), direction={direction}, metadata={{op_name="jit(scanned)/jvp()/while/cond/lt" stack_frame_id=4}}
}}

ENTRY %main.11 (x.1: bf16[256,512]) -> bf16[256,512] {{
  %constant.1054.clone = s32[]{{:T(128)}} constant({start})
  %copy.832 = s32[]{{:T(128)}} copy(%constant.1054.clone)
  %copy.376 = s32[]{{:T(128)}} copy(%copy.832)
  %x.1 = bf16[256,512]{{1,0:T(8,128)(2,1)}} parameter(0)
  %tuple.46 = (s32[]{{:T(128)}}, bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}}) tuple(%copy.376, /*index=1*/%x.1)
  %while.6 = (s32[]{{:T(128)}}, bf16[256,512]{{1,0:T(8,128)(2,1)S(1)}}) while(%tuple.46), condition=%wide.region_1.5.clone, body=%wide.region_0.4.clone.sunk, metadata={{op_name="jit(scanned)/jvp()/while" stack_frame_id=3}}
  ROOT %get-tuple-element.300 = bf16[256,512]{{1,0:T(8,128)(2,1)}} get-tuple-element(%while.6), index=1
}}
"""


def _scan(start: int = 0, step: int = 1, direction: str = "LT") -> str:
    return SCAN.format(start=start, step=step, direction=direction)


@pytest.mark.parametrize(
    ("loop", "trip"),
    [({}, 8), ({"start": 2}, 6), ({"step": 3}, 3), ({"start": 9}, 0), ({"direction": "NE"}, None)],
    ids=["from-0-by-1", "from-2", "by-3", "never", "not-a-count"],
)
def test_the_trip_count_is_read_from_the_loop_s_condition_and_counter(loop, trip):
    """XLA:TPU prints no known_trip_count: `i < 8`, i from a constant (through copies) by a constant step, runs
    ceil((8 - start) / step) times; a loop that is not such a count is counted once and reported."""
    text = _scan(**loop)
    assert "known_trip_count" not in text and [x.trip for x in while_loops(text)] == [trip]
    c = parse_collectives(text, devices=4)
    runs = 1 if trip is None else trip
    assert c.count.get("all-reduce", 0) == runs and c.uncounted_loops == (trip is None)
    assert c.bytes.get("all-reduce", 0.0) == pytest.approx(runs * 2 * (1 / 2) * 256 * 512 * 2)


NESTED = """\
HloModule jit_nested

%inner (p: (s32[])) -> (s32[]) {
  %all-gather.1 = f32[64]{0} all-gather(%y), channel_id=2, replica_groups={{0,1}}, dimensions={0}
}

%outer (p: (s32[])) -> (s32[]) {
  %while.2 = (s32[]) while(%t), condition=%c2, body=%inner, backend_config={"known_trip_count":{"n":"4"}}
}

ENTRY %main (x: f32[8]) -> f32[8] {
  %while.1 = (s32[]) while(%t), condition=%c1, body=%outer, backend_config={"known_trip_count":{"n":"3"}}
}
"""


def test_a_loop_inside_a_loop_runs_the_product_of_their_trips():
    loops = while_loops(NESTED)
    assert {x.body: (x.parent, x.trip) for x in loops} == {"outer": ("main", 3), "inner": ("outer", 4)}
    assert times_run(loops) == {"outer": 3, "inner": 12}
    assert parse_collectives(NESTED, devices=2).count == {"all-gather": 12}


def test_each_body_is_costed_alone_and_its_later_runs_added():
    """cost_analysis counts every body once (the inner one inside the outer's): the outer runs 2 more times (each
    with its inner once), and the inner 3 × 3 more times."""
    entries = []
    own = {"outer": (100.0, 10.0), "inner": (7.0, 1.0)}  # the outer's own work, the inner's

    def cost(text: str) -> tuple[float, float]:
        (entry,) = re.findall(r"^ENTRY %([\w.]+)", text, re.MULTILINE)
        entries.append(entry)
        assert "HloModule jit_nested_loop_body" in text and "%main" not in text  # the old entry dropped
        flops, moved = own[entry]
        return (flops + own["inner"][0], moved + own["inner"][1]) if entry == "outer" else (flops, moved)

    work = loop_work(NESTED, cost)
    assert sorted(entries) == ["inner", "outer"] and work.uncounted == 0
    assert work.flops == 2 * 107.0 + 3 * 3 * 7.0 and work.bytes == 2 * 11.0 + 3 * 3 * 1.0
    assert loop_work(_scan(direction="NE"), lambda text: (5.0, 1.0)).uncounted == 1  # its runs unknown
    assert "ENTRY %wide.region_0.4.clone.sunk" in body_module(_scan(), "wide.region_0.4.clone.sunk")


def test_a_body_s_module_keeps_only_the_computations_it_reaches():
    """Each loop's module is parsed on its own: the outer body's holds the inner body it runs, the inner's neither
    the outer nor the old entry, nor the scan's condition (the module's other loop)."""
    outer, inner = body_module(NESTED, "outer"), body_module(NESTED, "inner")
    assert "ENTRY %outer " in outer and "\n%inner " in outer and "%main" not in outer
    assert "ENTRY %inner " in inner and "%outer" not in inner and "%main" not in inner
    scan = body_module(_scan(), "wide.region_0.4.clone.sunk")
    assert "%wide.region_1.5.clone" not in scan


N, M, K = 8, 64, 128


def _compiled(scan: bool) -> CompiledStep:
    """The gradient of 8 [64,128] @ [128,128] matmuls (tanh between, a squared loss after), the layers scanned over
    one [8,128,128] stack or unrolled over 8 weights, compiled on this CPU and costed as `plan --compile` does."""
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.aot import xla_work

    def loss(x, ws, v):
        if scan:
            x = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
        else:
            for w in ws:
                x = jnp.tanh(x @ w)
        return ((x @ v) ** 2).sum()

    f32 = jnp.float32
    ws = [jax.ShapeDtypeStruct((K, K), f32)] * N if not scan else jax.ShapeDtypeStruct((N, K, K), f32)
    args = (jax.ShapeDtypeStruct((M, K), f32), ws, jax.ShapeDtypeStruct((K, 16), f32))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*args).compile()
    sizes = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes"), 0)
    times = dict.fromkeys(("build_s", "lower_s", "compile_s"), 0.0)
    work = xla_work(compiled, compiled.as_text())
    return CompiledStep("cpu", "cpu", 1, N, N, M, 1, **sizes, **work, **times, host_peak_rss_bytes=0, scanned=scan)


def test_a_scanned_step_s_roofline_counts_what_the_unrolled_one_does():
    """Both programs run the same 24 matmuls (8 forward, 8 to the weights, 8 to the input: the input's gradient is
    taken, so XLA drops none unrolled) and the same tanh; the scan adds its loops' index arithmetic, the counter's
    add and the slices' offsets, 3 flops per run of a body measured (2 loops × 8 runs: 50 flops). Counted once,
    as cost_analysis alone does, the scan's flops are 1/8 of its loops': far outside."""
    scanned, unrolled = _compiled(True), _compiled(False)
    assert scanned.loops_counted and scanned.uncounted_loops == 0 and scanned.roofline_note is None
    matmuls = 3 * N * 2 * M * K * K
    assert matmuls < unrolled.total_flops < 1.05 * matmuls
    index_arithmetic = 8 * 2 * N  # at most 8 flops per run of a body
    assert 0 <= scanned.total_flops - unrolled.total_flops <= index_arithmetic
    assert unrolled.total_flops - (scanned.flops + scanned.kernel_flops) > N / 2 * 2 * M * K * K  # counted once
    chip = CHIPS["tpu-v5p"]
    assert roofline(scanned, chip).compute_s == pytest.approx(roofline(unrolled, chip).compute_s, rel=1e-5)
    assert scanned.total_bytes > scanned.bytes_accessed > 0  # the loops' later runs read and write too
