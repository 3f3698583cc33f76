"""The `crosstune bench serve` client, measured two ways:

1. overhead: against a local fast streaming endpoint (another process, another core) that stamps every chunk with
   its send time (CLOCK_MONOTONIC, shared by both processes), the client's receive time minus the server's send time
   per chunk (the timestamp error) and the chunks/s the client sustains on one core, at several concurrencies;
2. fidelity: `vllm bench serve` and this client on the same vLLM server (the tiny Gemma 4, CPU build) with the same
   workload (random prompts of exact length, exact output length, same concurrency), metrics side by side.

    .venv/bin/python bench/serve_client.py                       # both parts (part 2 needs `make serve-env`)
    .venv/bin/python bench/serve_client.py --skip-vllm --streams 1,16,64 --tokens 256

Part 2 builds a tiny Gemma 4 under a temporary directory and stops its vLLM (process group) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SERVER = r"""
import asyncio, json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[2])})
TOKENS = int(sys.argv[3])

async def handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:  # a connection closed without a request
        return
    length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
    body = json.loads(await reader.readexactly(length))
    n = body["max_tokens"]
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    for i in range(n):
        msg = {"choices": [{"index": 0, "text": "x"}], "t": time.monotonic(),
               "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": i + 1}}
        writer.write(f"data: {json.dumps(msg)}\n\n".encode())
        await writer.drain()
        await asyncio.sleep(0)
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
    writer.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def overhead_level(url: str, streams: int, tokens: int) -> dict:
    """`streams` concurrent requests of `tokens` chunks each; per-chunk receive − send times."""
    import httpx

    lags: list[float] = []
    t0 = time.perf_counter()

    async def one(client: httpx.AsyncClient, i: int) -> None:
        body = {"model": "fast", "prompt": [i], "max_tokens": tokens, "stream": True}
        async with client.stream("POST", url, json=body, timeout=120) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    now = time.monotonic()
                    msg = json.loads(line[6:])
                    if "t" in msg:
                        lags.append(now - msg["t"])

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits) as client:
        await asyncio.gather(*(one(client, i) for i in range(streams)))
    wall = time.perf_counter() - t0
    lag_ms = np.array(lags) * 1000
    return {
        "streams": streams,
        "chunks": len(lags),
        "chunks_per_s": len(lags) / wall,
        "lag_ms_median": float(np.median(lag_ms)),
        "lag_ms_p99": float(np.percentile(lag_ms, 99)),
    }


def overhead(streams: list[int], tokens: int) -> list[dict]:
    port = free_port()
    ncpu = os.cpu_count() or 1
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(1 % ncpu), str(tokens)])
    try:
        os.sched_setaffinity(0, {0})  # the client on one core, the server on the other
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1/completions"
        return [asyncio.run(overhead_level(url, s, tokens)) for s in streams]
    finally:
        server.terminate()
        server.wait()
        os.sched_setaffinity(0, set(range(ncpu)))


KEYS = ["request_throughput", "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")
]


def vllm_bench_cmd(vllm: Path, url: str, model: Path, args, result: Path) -> list[str]:
    opts = {
        "--backend": "vllm",
        "--base-url": url,
        "--model": "tiny",
        "--tokenizer": str(model),
        "--dataset-name": "random",
        "--random-input-len": str(args.input_len),
        "--random-output-len": str(args.output_len),
        "--random-range-ratio": "0",
        "--num-prompts": str(args.num_prompts),
        "--max-concurrency": str(args.concurrency),
        "--num-warmups": "2",
        "--percentile-metrics": "ttft,tpot,itl,e2el",
        "--metric-percentiles": "50,90,99",
        "--result-dir": str(result.parent),
        "--result-filename": result.name,
    }
    return [str(vllm), "bench", "serve", *(x for kv in opts.items() for x in kv), "--ignore-eos", "--save-result"]


def fidelity(args) -> dict:
    """`vllm bench serve` and this client on one tiny-Gemma-4 vLLM server, alternating (A B B A ...) so that drift
    of the shared machine's load hits both; returns every round's metrics for both."""
    from crosstune.models.tiny import build_tiny_model
    from crosstune.serve.engine import require_vllm
    from crosstune.serve.process import start_server, stop_server
    from crosstune.servebench.sweep import SweepConfig, run_sweep
    from crosstune.synth import generate_corpus

    vllm = require_vllm()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    runs: dict[str, list[dict]] = {"vllm_bench": [], "crosstune": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        generate_corpus(tmp / "corpus", n_train=200, n_eval=8, seed=0)
        model = build_tiny_model("gemma4", tmp / "model", seed=0, corpus_dir=tmp / "corpus")
        state_dir = tmp / "server"
        try:
            t_start = time.perf_counter()
            state = start_server(model, state_dir, name="tiny", port=free_port(), max_model_len=2048)
            ready_s = time.perf_counter() - t_start
            for i in range(2 * args.rounds):
                if (i % 4) in (0, 3):
                    result = tmp / f"vllm{i}.json"
                    cmd = vllm_bench_cmd(vllm, state.base_url, model, args, result)
                    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=900)
                    runs["vllm_bench"].append(json.loads(result.read_text()) | {"client_cpu_s": _cpu(cpu0, True)})
                else:
                    cfg = SweepConfig(
                        endpoint=state.base_url,
                        model="tiny",
                        tokenizer=model,
                        contexts=[args.input_len],
                        concurrency=[args.concurrency],
                        output_len=args.output_len,
                        num_requests=args.num_prompts,
                        warmup=2,
                        seed=i,
                    )
                    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
                    cell = asyncio.run(run_sweep(cfg, tmp / f"ours{i}"))["cells"][0]
                    runs["crosstune"].append(cell | {"client_cpu_s": _cpu(cpu0, False)})
        finally:
            stop_server(state_dir)
    table: dict = {
        k: {who: [r.get(k) for r in rs] for who, rs in runs.items()} for k in [*KEYS, "completed", "client_cpu_s"]
    }
    ours = runs["crosstune"]
    table["server_median_ttft_ms (crosstune's /metrics delta)"] = [c["server"]["median_ttft_ms"] for c in ours]
    table["multi_token_chunk_share"] = [c["chunks"]["multi_token_chunk_share"] for c in ours]
    table["load_avg_1m"] = [c["load_avg_1m"][1] for c in ours]
    table["start_to_ready_s"] = ready_s
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1,16,64", help="concurrent streams for the overhead part")
    ap.add_argument("--tokens", type=int, default=256, help="chunks per stream for the overhead part")
    ap.add_argument("--skip-vllm", action="store_true", help="only the overhead part")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each client, alternating A B B A")
    args = ap.parse_args()
    result = {"overhead": overhead([int(s) for s in args.streams.split(",")], args.tokens)}
    for row in result["overhead"]:
        print(
            f"overhead: {row['streams']:>3} streams  {row['chunks_per_s']:>8,.0f} chunks/s on one core  "
            f"receive−send lag median {row['lag_ms_median']:.2f} ms  p99 {row['lag_ms_p99']:.2f} ms"
        )
    if not args.skip_vllm:
        result["fidelity"] = fidelity(args)
        print(f"{'metric':<28}{'vllm bench serve (per round)':>30}{'crosstune (per round)':>30}")
        for k, v in result["fidelity"].items():
            if isinstance(v, dict):
                print(f"{k:<28}{_fmt(v['vllm_bench']):>30}{_fmt(v['crosstune']):>30}")
            else:
                print(f"{k:<28}{_fmt(v):>30}")
    print(json.dumps(result))


def _cpu(before, children: bool) -> float:
    """CPU seconds (user + system) since `before`: of this process, or of finished children (vllm bench serve,
    whose figure includes its start-up: importing vLLM and loading the tokenizer)."""
    now = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return now.ru_utime + now.ru_stime - before.ru_utime - before.ru_stime


def _fmt(x) -> str:
    if isinstance(x, list):
        return " ".join(_fmt(v) for v in x)
    return "–" if x is None else f"{x:,.2f}"


if __name__ == "__main__":
    main()
