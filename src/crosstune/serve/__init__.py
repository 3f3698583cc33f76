"""Serving with vLLM: launch plans per target (`plan`), a managed local server (`process`), the benchmark client
and sweep (`client`, `sweep`, `metrics`, `server_metrics`, `report`) and the demo's serving stage (`stage`)."""
