"""Serving with vLLM: launch plans per target (`plan`, `render`, `capacity`), and a managed local server (`process`,
with `proctree` proving which processes are the server and `logscan` finding a failed start's cause). The benchmark
that measures a server is crosstune.servebench: it talks HTTP to any endpoint and imports nothing of this package.

The Python API other layers use:
- `process.start_server(model_dir, state_dir=None, name=..., port=...) -> ServerState` (ready: a 1-token completion
  answered by the process started; ServeError with the log's root cause otherwise) and
  `process.stop_server(state_dir) -> StopOutcome` (its `.message` says what was stopped or left alone).
- `plan.serve_plan(recipe, target)`: the launch plan (`vllm serve` flags, tensor parallelism, KV capacity).
"""
