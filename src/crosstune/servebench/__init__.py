"""The serving benchmark (`crosstune bench serve|compare`): it speaks the OpenAI-compatible API over HTTP to any
endpoint (a server crosstune started or not) and measures with vLLM's definitions. Transport (`client`), load
(`workload`: prompts from a per-run seed), the sweep (`sweep_config`, `sweep`, with `repeats` and the `max_rate`
search), one metrics and SLO definition (`request_metrics`, `server_metrics`, `slo`), the prefix cache's verdicts
(`prompt_cache`), named grids (`presets`), and outputs (`sweep_folder`, `summary`, `pareto`, `bench_table`) are
apart. It imports nothing of crosstune.serve (checked by tests/test_layering.py): what it knows of a server is its URL.

The Python API other layers use:
- `bench.run_bench(SweepConfig(...), out=None, overwrite=False) -> BenchResult`: the whole `bench serve` (checks,
  probe, sweep into a staged folder, plots), the one way `bench serve`, a study and the demo sweep; raises
  sweep.BenchError when nothing succeeded and crosstune.errors.Interrupted on Ctrl-C after keeping the finished
  cells; `BenchResult.problem` says why a sweep that wrote a summary is no success (aborted, an empty cell).
  `sweep.run_sweep(cfg, folder)` is the sweep alone, writing straight into `folder` (tests use it).
- `bench_table.render_summary(summary, console)`: the sweep's table, as `bench serve` prints it.
- `summary.load_summary(path)`: the one reader of a sweep's summary.json.
- `slo`: the one SLO spelling, parser (`parse_slo(["p99_ttft_ms=2000"])`, `check_slo`) and judge (`cell_misses`,
  `request_meets`), shared with cost, report, study and demo.
"""
