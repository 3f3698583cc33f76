"""Serving with vLLM: launch plans per target (`plan`, `render`; `layouts` the dp × tp choice, `capacity` weights and
KV per chip, `support` attention backends and LoRA paths), and a managed local server (`process`, with `proctree`
proving which processes are the server and `logscan` reading its log: a failed start's cause, the KV it allocated).
The benchmark that measures a server is crosstune.servebench: it talks HTTP to any endpoint and imports nothing of
this package.

The Python API other layers use:
- `process.start_server(model_dir, state_dir=None, name=..., port=...) -> ServerState` (ready: a 1-token completion
  answered by the process started; ServeError with the log's root cause otherwise) and
  `process.stop_server(state_dir) -> StopOutcome` (its `.message` says what was stopped or left alone).
- `plan.serve_plan(recipe, target)`: the launch plan (`vllm serve` flags, the chosen dp × tp and the alternatives,
  KV capacity for the dtype the chip allocates, attention backends, where adapters are served).
"""
