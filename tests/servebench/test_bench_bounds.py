"""`bench serve` is bounded and its exit status honest: a deadline per request (not per read), a probe before the
sweep, a bound on each cell; a cell without a successful request exits 1 saying why; Ctrl-C keeps the finished cells
and says so; a port where nothing ever listened is reported as such."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import crosstune
from crosstune.servebench.client import RequestRecord, completion_payload, send
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.ports import free_port
from tests.helpers.processes import default_sigint
from tests.helpers.serve import bench_args, cli, one_line_error


def config(url, tokenizer, **kw) -> SweepConfig:
    base = {"contexts": [16], "output_len": 8, "num_requests": 2, "warmup": 0}
    return SweepConfig(endpoint=url, model=kw.pop("model", "ok"), tokenizer=tokenizer, **{**base, **kw})


def test_the_deadline_covers_the_whole_request_not_one_read(tmp_path, tiny_gemma4_dir):
    """A server that trickles a byte every 50 ms never trips a per-read timeout; the deadline ends it."""
    with FakeOpenAI(stall_s=20.0) as server:
        start = time.monotonic()
        summary = asyncio.run(run_sweep(config(server.url, tiny_gemma4_dir, model="trickle", timeout_s=1.0), tmp_path))
        elapsed = time.monotonic() - start
    cell = summary["cells"][0]
    assert cell["failures"] == {"timeout": 2}
    assert cell["first_error"] == "timeout: no complete answer within the 1 s deadline per request (--timeout)"
    assert elapsed < 8.0  # two requests one after the other, 1 s each, plus start-up; the trickle lasts 20 s


def test_the_probe_fails_in_seconds_when_the_server_accepts_and_never_answers(tmp_path, tiny_gemma4_dir):
    from crosstune.servebench.sweep import BenchError

    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(BenchError, match=r"did not answer within 1 s \(--probe-timeout\).*nothing was sent"):
            asyncio.run(run_sweep(config(url, tiny_gemma4_dir, probe_timeout_s=1.0, timeout_s=3.0), tmp_path))
    assert time.monotonic() - start < 5.0


def test_a_cell_is_cut_at_its_bound_and_says_so(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI(stall_s=20.0) as server:
        start = time.monotonic()
        cfg = config(server.url, tiny_gemma4_dir, model="stall", concurrency=[1], timeout_s=60, cell_timeout_s=1.0)
        summary = asyncio.run(run_sweep(cfg, tmp_path))
        elapsed = time.monotonic() - start
    cell = summary["cells"][0]
    # concurrency 1: the first request is cut mid-way, the second never got its slot
    assert cell["failures"] == {"cut": 1, "not sent": 1}, cell["failures"]
    assert cell["first_error"] == "cut: the cell's bound (--cell-timeout 1 s) was reached mid-request"
    assert elapsed < 6.0
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["error"].split(":")[0] for r in records] == ["cut", "not sent"]


def test_a_stalled_endpoint_ends_the_sweep_after_one_cell(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI(stall_s=20.0) as server:
        cfg = config(server.url, tiny_gemma4_dir, model="stall", contexts=[16, 32], timeout_s=0.5)
        summary = asyncio.run(run_sweep(cfg, tmp_path))
    assert len(summary["cells"]) == 1 and len(server.requests) == 2
    assert summary["aborted"].startswith("every request of context 16, concurrency 1 failed at the endpoint (2 × ")


def test_a_failed_warm_up_skips_its_cell_and_only_an_endpoint_failure_ends_the_sweep(tmp_path, tiny_gemma4_dir):
    """`truncate` fails every request at context 100 (the request's fault): that cell is skipped, the next runs.
    A stalled warm-up (the endpoint's fault) ends the sweep."""
    with FakeOpenAI(stall_s=20.0) as server:
        cfg = config(server.url, tiny_gemma4_dir, model="truncate", contexts=[100, 16], warmup=1)
        skipped = asyncio.run(run_sweep(cfg, tmp_path / "a"))
        cfg = config(server.url, tiny_gemma4_dir, model="stall", contexts=[100, 16], warmup=1, timeout_s=0.5)
        stalled = asyncio.run(run_sweep(cfg, tmp_path / "b"))
    assert [c["failures"] for c in skipped["cells"]] == [{"skipped": 2}, {}] and skipped["aborted"] is None
    assert skipped["cells"][0]["first_error"] == (
        "skipped: every warm-up request failed (first: prompt length mismatch: 64 tokens on the server, 100 requested)"
    )
    assert [c["failures"] for c in stalled["cells"]] == [{"not sent": 2}]
    assert stalled["aborted"].startswith("every request of context 100, concurrency 1 failed at the endpoint")


@pytest.mark.parametrize(
    ("server_kw", "args", "message"),
    [
        ({"served": ["ok"]}, ["--model", "nope"], "serves ['ok'], not 'nope': pass one of them as --model"),
        (
            {"served": ["ok"], "max_model_len": 64},
            ["--contexts", "16,60,100"],
            "context(s) 60, 100 + 8 output tokens exceed the max_model_len 64 of 'ok'",
        ),
        ({}, ["--output-len", "0"], "--output-len: 0 is not a whole number >= 1 and <= 1,000,000 (tokens per request)"),
    ],
)
def test_a_sweep_that_cannot_succeed_is_refused_before_anything_is_sent(
    tmp_path, tiny_gemma4_dir, server_kw, args, message
):
    with FakeOpenAI(**server_kw) as server:
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), *args)))
    assert message in line
    assert server.requests == [] and not (tmp_path / "b").exists()


def test_a_cell_without_a_successful_request_exits_1_naming_the_cell_and_why(tmp_path, tiny_gemma4_dir):
    """The fixture's `truncate` cuts prompts to 64 tokens: context 16 succeeds, context 100 fails every request."""
    out = tmp_path / "b"
    with FakeOpenAI() as server:
        result = cli(
            *bench_args(server.url, tiny_gemma4_dir, "--contexts", "16,100", "--out", str(out), model="truncate")
        )
    line = one_line_error(result)
    assert line == (
        "error: context 100, concurrency 1: no successful request: 2 × prompt length mismatch (first: prompt length "
        "mismatch: 64 tokens on the server, 100 requested)"
    )
    summary = json.loads((out / "summary.json").read_text())  # what was measured is kept
    assert [c["completed"] for c in summary["cells"]] == [2, 0]


def test_every_request_failing_exits_1_and_writes_nothing(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        line = one_line_error(
            cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), model="error"))
        )
    assert "no request succeeded (context 16, concurrency 1: no successful request: 2 × HTTP 500 (first: HTTP" in line
    assert not (tmp_path / "b").exists()


def test_nothing_listening_is_reported_as_such(tmp_path, tiny_gemma4_dir):
    port = free_port()
    line = one_line_error(cli(*bench_args(f"http://127.0.0.1:{port}", tiny_gemma4_dir, "--out", str(tmp_path / "b"))))
    assert line.startswith(f"error: nothing listens at http://127.0.0.1:{port} (")
    assert "is the server running and is --endpoint right? nothing was sent" in line
    assert "stopped answering" not in line and "dropped stream" not in line
    record = RequestRecord(16, 1, None, 0, 16, 8)  # a request on its own: a refusal is not a dropped stream
    url = f"http://127.0.0.1:{port}/v1/completions"

    async def one():
        async with httpx.AsyncClient() as client:
            return await send(
                client, url, completion_payload("m", [1, 2], 8), record, asyncio.get_running_loop().time(), 5.0
            )

    assert asyncio.run(one()).error.startswith(f"refused: nothing accepted the connection to {url}")


# What is left to do after Ctrl-C: the cancelled sweep writes summary.json, the manifest, swaps the folder into place
# and says so; the interpreter exits with its heap frozen — ~0.2 s of CPU. With a busy child on every core beside this
# box's own load (load average ~15 on 2 cores) that took 1.3-2.3 s; plots and the exit's collection of torch's heap
# took 14-27 s there before. 10 s is four times the worst measured and far below the hung request's 120 s.
LATE_S = 10


@contextlib.contextmanager
def every_core_busy() -> Iterator[list[subprocess.Popen]]:
    """A CPU-bound child on every core this test may use, for as long as the block runs; killed by PID after it."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        yield busy
    finally:
        for child in busy:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()


def test_ctrl_c_keeps_the_finished_cells_and_marks_the_summary_interrupted(tmp_path, tiny_gemma4_dir):
    """Ctrl-C on a loaded machine. The child gets SIGINT as a terminal's foreground process does (default_sigint): a
    shell starts a background job (`make test &`) with SIGINT ignored, the child inherited that, and the Ctrl-C this
    test sent was dropped — the sweep waited in asyncio's select for its hung request: a fresh clone's make test."""
    out = tmp_path / "b"
    src = str(Path(crosstune.__file__).parents[1])  # the crosstune this test imported
    env = {**os.environ, "PYTHONPATH": src, "COLUMNS": "500", "PYTHONFAULTHANDLER": "1"}
    code = "import sys; from crosstune.cli import main; sys.argv[0] = 'crosstune'; main()"
    with FakeOpenAI(stall_s=120.0, stall_prompts_over=20) as server:  # context 16 answers, context 32 hangs
        argv = bench_args(server.url, tiny_gemma4_dir, "--contexts", "16,32", "--out", str(out))
        process = subprocess.Popen(
            [sys.executable, "-c", code, *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_sigint,
        )
        try:
            deadline = time.monotonic() + 60
            while len(server.requests) < 3 and time.monotonic() < deadline:  # 2 of context 16, the hung one
                time.sleep(0.05)
            assert len(server.requests) == 3, "the sweep did not reach its second cell"
            with every_core_busy():  # from before the Ctrl-C to the exit: what the bound is about
                time.sleep(0.3)
                process.send_signal(signal.SIGINT)
                start = time.monotonic()
                try:
                    output, _ = process.communicate(timeout=LATE_S)
                except subprocess.TimeoutExpired:
                    process.send_signal(signal.SIGABRT)
                    pytest.fail(
                        f"no exit {LATE_S} s after Ctrl-C; the child's stacks:\n" + process.communicate(timeout=10)[0]
                    )
                took = time.monotonic() - start
        finally:
            process.kill()
    print(f"exit {took:.2f} s after Ctrl-C, load average {os.getloadavg()[0]:.1f}")
    assert took < LATE_S
    assert process.returncode == 130, output
    said = " ".join(output.split())
    assert f"interrupted (Ctrl-C): the 1 finished cell(s) are kept in {out}" in said, output
    assert "no plots were drawn" in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and len(summary["cells"]) == 1
    assert summary["aborted"].startswith("interrupted (Ctrl-C) during context 32, concurrency 1")
    manifest = json.loads((out / "bench_manifest.json").read_text())
    assert manifest["complete"] is False and sorted(manifest["files"]) == ["requests.jsonl", "summary.json"]  # no plots
