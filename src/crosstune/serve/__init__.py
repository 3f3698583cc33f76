"""Serving with vLLM: launch plans per target (`plan`, `render`, `capacity`), a managed local server (`process`, with
`proctree` proving which processes are the server and `logscan` finding a failed start's cause), and the benchmark
(`client`, `sweep`, `metrics`, `server_metrics`, `slo`, `output`, `bench`, `bench_table`, `report`).

The Python API other layers use:
- `process.start_server(model_dir, state_dir=None, name=..., port=...) -> ServerState` (ready: a 1-token completion
  answered by the process started; ServeError with the log's root cause otherwise) and
  `process.stop_server(state_dir) -> StopOutcome` (its `.message` says what was stopped or left alone).
- `bench.run_bench(SweepConfig(...), out=None, overwrite=False) -> BenchResult`: the whole `bench serve` (checks,
  probe, sweep into a staged folder, plots), the one way `bench serve`, a study and the demo sweep; raises
  sweep.BenchError when nothing succeeded and crosstune.errors.Interrupted on Ctrl-C after keeping the finished
  cells; `BenchResult.problem` says why a sweep that wrote a summary is no success (aborted, an empty cell).
  `sweep.run_sweep(cfg, folder)` is the sweep alone, writing straight into `folder` (tests use it).
- `bench_table.render_summary(summary, console)`: the sweep's table, as `bench serve` prints it.
- `slo`: the one SLO spelling, parser (`parse_slo(["p99_ttft_ms=2000"])`, `check_slo`) and judge (`cell_misses`,
  `request_meets`), shared with cost, report, study and demo.
"""
