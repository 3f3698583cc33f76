"""Real vLLM (the CPU build in .venv-serve) started and stopped by crosstune: stop ends the engine core after a
kill -9 of the API server, a failed start names vLLM's own root cause, and another server taking the port is not
mistaken for vLLM. `make test-serve` runs these (one full start, two that fail in seconds)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from crosstune.families import get_family
from crosstune.hardware import HARDWARE
from crosstune.serve.capacity import capacity
from crosstune.serve.engine import ServeError, kv_paging, vllm_binary
from crosstune.serve.process import start_server, stop_server
from crosstune.serve.state import read_state
from tests.helpers.fake_vllm import stranger_takes_the_port
from tests.helpers.ports import free_port

pytestmark = [
    pytest.mark.serve,
    pytest.mark.skipif(vllm_binary() is None, reason="the serving environment .venv-serve is absent: `make serve-env`"),
]


def running(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_stop_after_a_kill_9_of_vllms_api_server_ends_its_engine(tmp_path, tiny_gemma4_dir):
    state_dir = tmp_path / "server"
    try:
        state = start_server(tiny_gemma4_dir, state_dir, name="tiny", port=free_port(), max_model_len=256)
        members = read_state(state_dir).members
        print("recorded:", [m["cmdline"][:60] for m in members])  # shown by `pytest -rP`
        assert members, "vLLM's engine core runs in a process of its own"
        kv = read_state(state_dir).kv_cache  # what vLLM's log says it allocated (VLLM_CPU_KVCACHE_SPACE=1 GiB)
        assert kv["device"] == "CPU" and kv["max_model_len"] == 256 and kv["tokens"] > 0, kv
        # vLLM logs tokens = int(max_concurrency × max_model_len), the concurrency rounded to 2 decimals
        assert abs(kv["tokens"] - kv["max_concurrency"] * 256) <= 0.005 * 256 + 1, kv
        # the plan's capacity (vLLM's admission rule) against what vLLM allocated: its whole-block count is floored
        cfg = json.loads((tiny_gemma4_dir / "config.json").read_text())
        spec = get_family("gemma4").spec_from_hf_config(cfg.get("text_config", cfg))
        cpu = kv_paging(HARDWARE["cpu"], sliding_cache=True)
        cap = capacity(
            spec, 1, weight_dtype="float32", kv_dtype="float32", kv_budget_gib=1.0, lengths=[256], paging=cpu
        )
        assert abs(cap.max_concurrency - kv["max_concurrency"]) <= 0.01, (cap, kv)
        os.kill(state.pid, signal.SIGKILL)
        try:
            os.waitpid(state.pid, 0)  # this process started it
        except ChildProcessError:
            pass
        outcome = stop_server(state_dir)
    finally:
        stop_server(state_dir)
    assert outcome.message.startswith(f"the server's main process (pid {state.pid}) was already gone; stopped its")
    deadline = time.monotonic() + 30
    while any(running(m["pid"]) for m in members) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(running(m["pid"]) for m in members)


def test_a_failed_vllm_start_names_vllms_root_cause(tmp_path, tiny_gemma4_dir):
    with pytest.raises(ServeError) as e:
        start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), max_model_len=1_000_000)
    message = str(e.value)
    print(message)
    assert message.startswith("vLLM exited (status 1) before it was ready; root cause (line ")
    assert "max_model_len" in message and str(tmp_path / "s" / "vllm.log") in message


def test_another_server_taking_the_port_is_not_mistaken_for_vllm(tmp_path, tiny_gemma4_dir, monkeypatch):
    with stranger_takes_the_port(monkeypatch):
        with pytest.raises(ServeError) as e:
            start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), max_model_len=256)
    print(e.value)
    assert "Address already in use" in str(e.value) and "root cause (line " in str(e.value)
