"""Serving with vLLM: launch plans per target (`plan`, `render`, `capacity`), a managed local server (`process`, with
`proctree` proving which processes are the server and `logscan` finding a failed start's cause), and the benchmark
(`client`, `sweep`, `metrics`, `server_metrics`, `slo`, `output`, `bench`, `report`).

The Python API other layers use:
- `process.start_server(model_dir, state_dir=None, name=..., port=...) -> ServerState` (ready: a 1-token completion
  answered by the process started; ServeError with the log's root cause otherwise) and
  `process.stop_server(state_dir) -> StopOutcome` (its `.message` says what was stopped or left alone).
- `bench.run_bench(SweepConfig(...), out=None, overwrite=False) -> BenchResult`: the whole `bench serve` (checks,
  probe, sweep into a staged folder, plots); raises sweep.BenchError when nothing succeeded and
  crosstune.errors.Interrupted on Ctrl-C after keeping the finished cells. `sweep.run_sweep(cfg, folder)` is the
  sweep alone, writing straight into `folder`.
- `slo.parse_slo(["p99_ttft_ms=2000"])`: the one SLO spelling, shared with cost/report.
"""
