"""What the serving bench's tests share: the CLI run in-process, a small `bench serve`'s arguments, the one-line
error of an expected failure, and vLLM's metric definitions written out independently (to check a summary by). The
server they talk to is tests/helpers/fake_openai.py's."""

from __future__ import annotations

import math
import statistics


def percentile(xs: list[float], p: float) -> float:
    """Linear interpolation between closest ranks, written out (the independent check of numpy's default)."""
    xs = sorted(xs)
    pos = (len(xs) - 1) * p / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def recompute(records: list[dict], duration: float) -> dict:
    """The summary's metrics from the per-request JSONL alone, by vLLM's definitions."""
    ok = [r for r in records if r["ok"]]
    out_tokens = sum(r["completion_tokens"] for r in ok)
    in_tokens = sum(r["prompt_tokens"] for r in ok)
    ttft = [1000 * r["ttft_s"] for r in ok]
    e2el = [1000 * r["e2el_s"] for r in ok]
    tpot = [1000 * (r["e2el_s"] - r["ttft_s"]) / (r["completion_tokens"] - 1) for r in ok if r["completion_tokens"] > 1]
    itl = [1000 * g for r in ok for g in r["itl_s"]]
    got = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "request_throughput": len(ok) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
    }
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        got[f"mean_{name}_ms"] = statistics.fmean(xs)
        got[f"median_{name}_ms"] = statistics.median(xs)
        got[f"p90_{name}_ms"] = percentile(xs, 90)
        got[f"p99_{name}_ms"] = percentile(xs, 99)
    return got


def cli(*args: str):
    """`crosstune ARGS` in-process (typer's CliRunner): the result's exit_code and output (stdout + stderr)."""
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    return CliRunner().invoke(app, list(args))


def bench_args(url: str, tokenizer, *extra: str, model: str = "ok") -> list[str]:
    """A small `bench serve` against `url`: one context of 16 tokens, concurrency 1, 8 output tokens, 2 requests."""
    base = ["bench", "serve", "--endpoint", url, "--model", model, "--tokenizer", str(tokenizer)]
    base += ["--contexts", "16", "--concurrency", "1", "--output-len", "8", "--num-requests", "2", "--warmup", "0"]
    return [*base, *extra]


def one_line_error(result) -> str:
    """The single `error: …` line an expected failure prints (asserts there is exactly one and no traceback)."""
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return lines[0]
