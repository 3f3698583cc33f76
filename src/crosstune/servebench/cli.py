"""`crosstune bench serve|compare`: option parsing with one-line errors, the sweep (servebench.bench.run_bench), its
table (servebench.bench_table) and the comparison of two summaries."""

from __future__ import annotations

import gc
import math
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.bounds import option_bound
from crosstune.errors import Interrupted
from crosstune.servebench.sweep import BenchError

console = Console(soft_wrap=True)
bench_app = typer.Typer(help="Benchmark a serving endpoint the way `vllm bench serve` does.")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def parse_list(text: str, option: str, convert, what: str, problem) -> list:
    """A comma-separated option: each part converted (`what` names the expected kind) and then checked (`problem`
    returns why a value is refused, or None); BenchError naming the option and the value otherwise."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = convert(part)
        except ValueError:
            raise BenchError(f"{option} {text!r}: {part!r} is not {what} (comma-separated, e.g. 1,4)") from None
        if why := problem(value):
            raise BenchError(f"{option} {text!r}: {part} {why}")
        values.append(value)
    if not values:
        raise BenchError(f"{option} {text!r}: give at least one value")
    return values


def parse_ints(text: str, option: str) -> list[int]:
    """'128,512' -> [128, 512], each within the option's bound (crosstune.bounds.OPTIONS)."""
    b = option_bound("bench serve", option)
    return parse_list(
        text,
        option,
        int,
        "an integer",
        lambda v: f"is below {b.low:g}" if v < b.low else f"is above {b.high:,.0f} ({b.what})" if v > b.high else None,
    )


def parse_rates(text: str) -> list[float]:
    """'0.5,2' -> [0.5, 2.0]: positive, finite requests per second."""
    refused = "is not a positive, finite request rate (for all requests at once, use --concurrency)"
    most = option_bound("bench serve", "--rates").high
    return parse_list(
        text,
        "--rates",
        float,
        "a number of requests per second",
        lambda v: (
            refused
            if not (math.isfinite(v) and v > 0)
            else f"is above {most:,.0f} requests per second"
            if v > most
            else None
        ),
    )


@bench_app.command("serve")
def bench_serve(
    endpoint: str = typer.Option(..., "--endpoint", help="base URL, e.g. http://127.0.0.1:8000"),
    model: str = typer.Option(..., "--model", help="the served model name"),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="the model's tokenizer directory (exact prompt lengths)"),
    contexts: str = typer.Option(None, "--contexts", help="prompt lengths in tokens, comma-separated [128,512]"),
    concurrency: str = typer.Option(None, "--concurrency", help="concurrency levels (>= 1), comma-separated [1,4]"),
    preset: str = typer.Option(
        None, "--preset", help="a named grid (contexts, concurrency, output length): seed = the seed's serving table"
    ),
    rates: str = typer.Option(None, "--rates", help="request rates (req/s, > 0) instead of concurrency levels"),
    max_concurrency: int = typer.Option(None, "--max-concurrency", help="with --rates: requests in flight at most"),
    burstiness: float = typer.Option(1.0, "--burstiness", help="gamma shape of arrival gaps (1 = Poisson)"),
    output_len: int = typer.Option(None, "--output-len", help="exact output tokens per request (ignore_eos) [32]"),
    num_requests: int = typer.Option(16, "--num-requests", help="timed requests per cell"),
    warmup: int = typer.Option(2, "--warmup", help="untimed requests before each cell"),
    api: str = typer.Option("completions", "--api", help="completions (token-id prompts) or chat"),
    timeout_s: float = typer.Option(120.0, "--timeout", help="deadline per request (the whole exchange), seconds"),
    cell_timeout_s: float = typer.Option(600.0, "--cell-timeout", help="bound on one cell, warm-up included, s"),
    probe_timeout_s: float = typer.Option(10.0, "--probe-timeout", help="bound on the probe before the sweep, s"),
    slo: list[str] = typer.Option(
        None, "--slo", help="SLO as in cost/report: NAME=MS, e.g. --slo p99_ttft_ms=2000 --slo p99_tpot_ms=50"
    ),
    seed: int = typer.Option(
        None, "--seed", help="the prompts' seed, for an exact rerun (default: a fresh one per run, in summary.json)"
    ),
    prefix_reuse: float = typer.Option(
        None, "--prefix-reuse", help="measure the prefix cache: share R (0<R<1) of each prompt is a shared prefix"
    ),
    repeats: int = typer.Option(1, "--repeats", help="runs per cell: 95 % confidence intervals over them"),
    find_max_rate: list[str] = typer.Option(
        None,
        "--find-max-rate",
        help="search the highest request rate meeting this SLO (NAME=MS, repeatable; --rates: the start rate)",
    ),
    max_rate_steps: int = typer.Option(8, "--max-rate-steps", help="with --find-max-rate: cells per context, at most"),
    rate_resolution: float = typer.Option(
        0.1, "--rate-resolution", help="with --find-max-rate: stop when missed / met rate <= 1 + this"
    ),
    out: Path = typer.Option(
        None, "--out", help="output folder (default: a new runs/bench/<label or model>-<date>-<time>)"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace --out if it holds an earlier sweep"),
    label: str = typer.Option(None, "--label"),
    target: str = typer.Option(None, "--target", help="hardware target name, for the cost report"),
) -> None:
    """Sweep context lengths × concurrency (or request rates): per-request JSONL, summary.json, plots.

    Prompts come from a fresh seed per run (recorded): a rerun against a long-lived server must not measure its
    prefix cache; the server's prefix-cache counters are read per cell and a cold cell with hits is flagged.

    Exit 0 when every cell ran and had a successful request; 1 (saying which cell and why) when one had none or
    the server stopped answering; 130 on Ctrl-C, after writing the finished cells.
    \f
    Over 80 lines for its options alone, one typer parameter each; the body parses them into a SweepConfig."""
    from crosstune.servebench.bench import run_bench
    from crosstune.servebench.bench_table import render_summary
    from crosstune.servebench.slo import parse_slo
    from crosstune.servebench.sweep import SweepConfig

    if max_concurrency is not None and not (rates or find_max_rate):
        raise BenchError("--max-concurrency caps a --rates sweep; with --concurrency each level is its own cap")
    if find_max_rate and slo:
        raise BenchError("--find-max-rate names the SLO the search meets: give it there, not also as --slo")
    slo_ms = parse_slo(find_max_rate, "--find-max-rate") if find_max_rate else parse_slo(slo)
    contexts, concurrency, output_len = _grid(preset, contexts, concurrency, output_len)
    by_rate = bool(rates or find_max_rate)
    cfg = SweepConfig(
        endpoint=endpoint,
        model=model,
        tokenizer=tokenizer,
        contexts=parse_ints(contexts, "--contexts"),
        concurrency=parse_ints(concurrency, "--concurrency") if not by_rate else [],
        rates=parse_rates(rates) if rates else None,
        max_concurrency=max_concurrency,
        burstiness=burstiness,
        output_len=output_len,
        num_requests=num_requests,
        warmup=warmup,
        api=api,
        timeout_s=timeout_s,
        cell_timeout_s=cell_timeout_s,
        probe_timeout_s=probe_timeout_s,
        slo_ms=slo_ms,
        seed=seed,
        prefix_reuse=prefix_reuse,
        repeats=repeats,
        find_max_rate=bool(find_max_rate),
        max_rate_steps=max_rate_steps,
        rate_resolution=rate_resolution,
        preset=preset,
        label=label,
        target=target,
    )
    try:
        result = run_bench(
            cfg, out, overwrite=overwrite, progress=lambda line: print(line, file=sys.stderr, flush=True)
        )
    except Interrupted:
        # Nothing is left but to exit: freeze the heap, or the interpreter's exit collects torch's and transformers'
        # ~350k objects (the tokenizer imports them) once more — 1 s of CPU, ten times that on a busy machine.
        gc.freeze()
        raise
    render_summary(result.summary, console)
    console.print(f"wrote {result.out}/summary.json, {result.out}/requests.jsonl and plots", highlight=False)
    if result.problem:
        raise BenchError(result.problem)


@bench_app.command("compare")
def compare(
    a: Path = typer.Argument(..., help="summary.json (or its directory)"), b: Path = typer.Argument(...)
) -> None:
    """Two sweeps side by side per (context, level), with B/A ratios; client latencies of bursty cells marked.

    By the report's rule (what is compared is named; several differences at once are a warning): refused (exit 1)
    when the workloads differ, e.g. one sweep is cold and the other cached (a --prefix-reuse sweep, or a cold one
    whose cells hit the prefix cache). A sweep with a speculative-decoding drafter against one without is compared."""
    from dataclasses import replace

    from crosstune.servebench.bench_table import BURSTY_MARK, BURSTY_NOTE
    from crosstune.servebench.summary import compare_rows, load_summary
    from crosstune.servebench.summary_cells import read_sweep
    from crosstune.servebench.sweep_comparison import compare_sweeps

    try:
        sa, sb = load_summary(a), load_summary(b)
    except ValueError as e:
        raise BenchError(str(e)) from None
    findings = compare_sweeps([replace(read_sweep(a), label=f"A ({a})"), replace(read_sweep(b), label=f"B ({b})")])
    if errors := [f.text for f in findings if f.level == "error"]:
        raise BenchError("; ".join(errors))
    for finding in findings:
        console.print(finding.text, style="yellow" if finding.level == "warn" else None, highlight=False)
    rows = compare_rows(sa, sb)
    if not rows:
        raise BenchError(f"{a} and {b} share no (context, concurrency/rate) cell")
    t = Table(title=f"A = {sa.get('label') or a}   B = {sb.get('label') or b}")
    # a bursty cell is a short mark and one footnote: a sentence per row squeezed the metric names out of 80 columns
    for col in ("ctx", "load", "metric", "A", "B", "B/A", f"bursty{BURSTY_MARK}"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            str(r["context_len"]),
            str(r["level"]),
            r["metric"],
            _num(r["a"]),
            _num(r["b"]),
            "–" if r["ratio"] is None else f"{r['ratio']:.2f}×",
            ", ".join(r["bursty"]),
        )
    console.print(t)
    if any(r["bursty"] for r in rows):
        console.print(f"{BURSTY_MARK} bursty: in the sweep(s) named, {BURSTY_NOTE}", highlight=False)


def _grid(preset: str | None, contexts: str | None, concurrency: str | None, output_len: int | None):
    """(contexts, concurrency, output_len) from --preset's grid or the options (defaults 128,512 / 1,4 / 32)."""
    if preset is not None:
        from crosstune.servebench.presets import get_preset

        grid = get_preset(preset)
        given = [
            o
            for o, v in (("--contexts", contexts), ("--concurrency", concurrency), ("--output-len", output_len))
            if v is not None
        ]
        if given:
            raise BenchError(f"--preset {preset} sets the grid: drop {', '.join(given)} (or the preset)")
        return ",".join(map(str, grid.contexts)), ",".join(map(str, grid.concurrency)), grid.output_len
    return contexts or "128,512", concurrency or "1,4", 32 if output_len is None else output_len


def _num(x) -> str:
    return "–" if x is None else f"{x:,.2f}"
