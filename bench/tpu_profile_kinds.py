"""A `plan --run --profile DIR` trace split into the kinds of work crosstune.planner.timing counts: XProf's per-HLO
statistics (hlo_stats) summed into the weight and LM-head matmuls, LoRA's thin matmuls (rank-wide operands), the
attention kernel (Pallas custom calls), the elementwise fusions with the bandwidth they reached, and a scanned step's
dynamic-slice copies of its stacked weights and kept outputs; the calibration's numbers come from here.

    pip install xprof   # in an environment of its own (not in the lock)
    python bench/tpu_profile_kinds.py DIR [--rank 64] [--vocab 262144] [--json]
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys


def hlo_rows(trace_dir: str) -> list[dict]:
    """XProf's hlo_stats table of the trace's xplane files, one dict per HLO op."""
    from xprof.convert import raw_to_tool_data

    paths = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    if not paths:
        raise SystemExit(f"{trace_dir}: no *.xplane.pb (make one with `crosstune plan RECIPE --run --profile DIR`)")
    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "hlo_stats", {})
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [c["v"] if c else None for c in row["c"]], strict=True)) for row in table["rows"]]


def kinds(rows: list[dict], rank: int, vocab: int) -> dict:
    """Seconds of one profiled step per kind, and the elementwise fusions' bytes-weighted bandwidth (GB/s)."""
    thin = re.compile(rf"[\[,]{rank}[\],]")
    out = {
        "head_matmul": 0.0,
        "matmul": 0.0,
        "lora_matmul": 0.0,
        "attention": 0.0,
        "head_elementwise": 0.0,
        "elementwise": 0.0,
        "scan_slices": 0.0,
    }
    moved = seconds = 0.0
    for r in rows:
        t, text = (r["total_self_time"] or 0.0) / 1e6, (r["hlo_op_expression"] or "")[:400]
        if r["category"] == "convolution fusion":
            key = "head_matmul" if str(vocab) in text else "lora_matmul" if thin.search(text) else "matmul"
        elif r["category"] == "custom-call":
            key = "attention"
        elif (r["hlo_op_name"] or "").startswith("dynamic-slice"):  # a scanned step's per-iteration copies of its
            key = "scan_slices"  # stacked weights and kept outputs (docs/BENCHMARKS.md: 27 ms of the 31B's 4 layers)
        else:
            key = "head_elementwise" if str(vocab) in text else "elementwise"
            moved += (r["measured_memory_bw"] or 0.0) * t
            seconds += t
        out[key] += t
    out["elementwise_gbs"] = moved / seconds if seconds else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir")
    parser.add_argument("--rank", type=int, default=64, help="the LoRA rank: matmuls with a rank-wide operand")
    parser.add_argument("--vocab", type=int, default=262144, help="the LM head's width")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = kinds(hlo_rows(args.trace_dir), args.rank, args.vocab)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        for key, value in found.items():
            print(f"{key:18s} {value * 1e3:8.2f} ms" if key != "elementwise_gbs" else f"{key:18s} {value:8.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
