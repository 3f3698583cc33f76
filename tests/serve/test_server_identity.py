"""`serve start/stop` deal with the right process: a busy port is refused before starting, readiness proves the
answering server is the one started, the state lives in one place whatever the current folder, stop ends the whole
tree even after a kill -9 of the main process and never signals a stranger that reused a stale PID; a failed start
shows its root cause; adapters get the chat-template check merged exports get; a damaged config.json is one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from crosstune.serve.engine import ServeError
from crosstune.serve.process import start_server, stop_server
from crosstune.serve.state import read_state
from tests.helpers.export import write_export_manifest
from tests.helpers.fake_vllm import KV_LINE, ROOT_CAUSE, stranger_takes_the_port
from tests.helpers.ports import free_port
from tests.helpers.records import write_record
from tests.helpers.serve import cli, one_line_error


def running(pid: int) -> bool:
    """`pid` runs and is no zombie (read from /proc here, independently of crosstune.serve.proctree)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def group(pgid: int) -> list[int]:
    """Running members of process group `pgid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def start_ticks(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])


def wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_busy_port_is_refused_before_anything_starts(tmp_path, tiny_gemma4_dir, fake_vllm):
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(ServeError) as e:
            start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=port)
    assert str(e.value).startswith(f"port {port} on 127.0.0.1 is in use (Address already in use) by pid {os.getpid()}")
    assert str(e.value).endswith("stop it, or pass another --port")
    assert not (tmp_path / "s" / "vllm.log").exists()  # nothing was started


def test_readiness_is_not_fooled_by_another_server_taking_the_port(tmp_path, tiny_gemma4_dir, fake_vllm):
    """The port is free when checked; another server takes it before the server binds it (the fake waits 1 s). The
    server then dies with "Address already in use" while the stranger answers every readiness probe."""
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    fake_vllm.setenv("FAKE_VLLM_DELAY", "1.0")
    with stranger_takes_the_port(fake_vllm):
        with pytest.raises(ServeError) as e:
            start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    message = str(e.value)
    assert message.startswith("vLLM exited (status 1) before it was ready; root cause (line ")
    assert message.endswith(f"in {tmp_path / 's' / 'vllm.log'}): OSError: [Errno 98] Address already in use")
    assert not (tmp_path / "s" / "server.json").exists()


def test_the_default_state_dir_does_not_depend_on_the_current_folder(tmp_path, tiny_gemma4_dir, fake_vllm):
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    fake_vllm.delenv("CROSSTUNE_SERVE_STATE")
    fake_vllm.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    port = str(free_port())
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    fake_vllm.chdir(tmp_path / "a")
    started = cli("serve", "start", str(tiny_gemma4_dir), "--port", port)
    assert started.exit_code == 0, started.output
    state_dir = tmp_path / "xdg" / "crosstune" / "serve" / f"port-{port}"
    pid = read_state(state_dir).pid
    try:
        fake_vllm.chdir(tmp_path / "b")
        again = one_line_error(cli("serve", "start", str(tiny_gemma4_dir), "--port", port))
        assert again == f"error: {state_dir}: a server (pid {pid}, port {port}) runs: `crosstune serve stop " + (
            f"--state-dir {state_dir}` it first"
        )
        stopped = cli("serve", "stop")  # from another folder, without naming it: the one recorded server
    finally:
        stop_server(state_dir)
    assert stopped.exit_code == 0 and f"stopped the server on port {port} (2 process(es)" in stopped.output
    assert not group(pid)


def test_stop_after_a_kill_9_of_the_main_process_stops_the_rest(tmp_path, tiny_gemma4_dir, fake_vllm):
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    state = start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    workers = [m["pid"] for m in read_state(tmp_path / "s").members if m["pid"] != state.pid]
    assert len(workers) == 1  # the fake's `sleep`, as vLLM's engine core
    recorded = read_state(tmp_path / "s").kv_cache  # the KV cache the server's log reported, in its state
    assert recorded == state.kv_cache and {k: v for k, v in recorded.items() if k != "line"} == {
        "device": "CPU",
        "tokens": 316551,
        "max_concurrency": 309.13,
        "max_model_len": 1024,
        "blocks": None,
    }
    assert KV_LINE in Path(state.log).read_text().splitlines()[recorded["line"] - 1]
    os.kill(state.pid, signal.SIGKILL)
    try:
        os.waitpid(state.pid, 0)  # this test process is its parent
    except ChildProcessError:
        pass
    outcome = stop_server(tmp_path / "s", grace_s=5)
    assert outcome.message == (
        f"the server's main process (pid {state.pid}) was already gone; stopped its 1 remaining process(es): "
        f"{workers[0]}"
    )
    wait_gone(workers[0])
    assert not running(workers[0]) and not group(state.pid)


def test_stop_never_signals_a_stranger_that_reused_a_stale_pid(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # its own group, as a server's would be
    try:
        pid = stranger.pid
        # Popen returns once the child's exec has begun (vfork), but Linux fills /proc/PID/cmdline only when the
        # ELF loader has set up the new stack: under load an empty command line was read here. Wait for it.
        deadline = time.monotonic() + 10
        while open(f"/proc/{pid}/cmdline", "rb").read() != b"sleep\x0060\x00" and time.monotonic() < deadline:
            time.sleep(0.01)
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
        recorded = {"pid": pid, "start": start_ticks(pid) - 1, "boot": boot, "cmdline": "vllm serve /m"}
        state = {
            "pid": pid,
            "port": 1,
            "model": "m",
            "lora_name": None,
            "model_dir": "/m",
            "log": "/m.log",
            "started": 0.0,
            "leader": recorded,
            "members": [recorded],
        }
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "server.json").write_text(json.dumps(state))
        outcome = stop_server(tmp_path / "s", grace_s=1)
        time.sleep(0.2)
        assert stranger.poll() is None  # still running: never signalled
        assert not outcome and outcome.message == (
            f"the server recorded in {tmp_path / 's'} is gone; pid {pid} is now another process (sleep 60), left "
            "alone; removed the stale server.json"
        )
        assert not (tmp_path / "s" / "server.json").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_failed_start_shows_the_root_cause_and_the_log(tmp_path, tiny_gemma4_dir, fake_vllm):
    fake_vllm.setenv("FAKE_VLLM_MODE", "noisy_crash")
    with pytest.raises(ServeError) as e:
        start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    log = tmp_path / "s" / "vllm.log"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith(ROOT_CAUSE)) + 1
    assert at > 100 and len(lines) - at == 120  # deep in the log, far from its last lines
    assert (
        str(e.value)
        == f"vLLM exited (status 1) before it was ready; root cause (line {at} of {len(lines)} in {log}): {ROOT_CAUSE}"
    )
    fake_vllm.setenv(
        "FAKE_VLLM_MODE", "exit_early"
    )  # the log is appended to: the first start's cause is not this one's
    with pytest.raises(ServeError) as again:
        start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    assert ROOT_CAUSE not in str(again.value) and "no error in the log; its last lines" in str(again.value)


def test_kv_capacity_read_from_vllms_log_lines():
    """vLLM v1's "<DEVICE> KV cache size: N tokens, Maximum concurrency …" (0.32 CPU, GPU, TPU); V0's "# GPU blocks";
    the last report wins; nothing reported: None."""
    from crosstune.serve.logscan import kv_capacity

    v1 = ["INFO start", "(EngineCore pid=1) INFO 12-02 [kv_cache_utils.py:2327] " + KV_LINE, "INFO more"]
    assert kv_capacity(v1) == {
        "device": "CPU",
        "tokens": 316551,
        "max_concurrency": 309.13,
        "max_model_len": 1024,
        "blocks": None,
        "line": 2,
    }
    gpu = ["INFO [kv_cache_utils.py:2146] GPU KV cache size: 415,872 tokens", "TPU KV cache size: 9 tokens"]
    assert [kv_capacity(gpu[:1])["tokens"], kv_capacity(gpu)["device"]] == [415872, "TPU"]
    v0 = ["INFO 05-01 [executor_base.py:113] # GPU blocks: 2048, # CPU blocks: 512"]
    assert kv_capacity(v0) == {
        "device": "GPU",
        "tokens": None,
        "max_concurrency": None,
        "max_model_len": None,
        "blocks": 2048,
        "line": 1,
    }
    assert kv_capacity(["INFO [cpu_executor.py:1] # cpu blocks: 7281"])["blocks"] == 7281
    assert kv_capacity(["INFO CPU KV cache usage: 0.0%, Prefix cache hit rate: 42.3%"]) is None


def test_root_cause_is_the_first_tracebacks_exception():
    from crosstune.serve.logscan import root_cause

    plain = [
        "noise",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "    x()",
        "ValueError: first",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "b.py", line 2',
        "RuntimeError: second",
    ]
    assert root_cause(plain).text == "ValueError: first" and root_cause(plain).line == 5
    p = "(EngineCore pid=1) ERROR 11-30 [core.py:1] "
    interleaved = [
        p + "Traceback (most recent call last):",
        p + '  File "x.py", line 3, in f',
        "(APIServer pid=2) INFO 11-30 waiting for engine",
        p + "    f()",
        p + "torch.OutOfMemoryError: CPU out of memory",
    ]
    assert root_cause(interleaved).text == "torch.OutOfMemoryError: CPU out of memory"
    pydantic = [
        p + "Traceback (most recent call last):",
        p + '  File "cfg.py", line 9, in __init__',
        p + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        p + "  Value error, User-specified max_model_len (200000) is greater than the derived 131072",
    ]
    assert root_cause(pydantic).text == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig — Value error, "
        "User-specified max_model_len (200000) is greater than the derived 131072"
    )
    assert root_cause(["INFO fine", "ERROR 11-30 [x.py:1] model not found", "INFO more"]).line == 2
    assert root_cause(["INFO all fine"]) is None


def _adapter_with_recorded_template(folder, tokenizer_dir, how: str):
    from transformers import AutoTokenizer

    from crosstune.data.prepared import chat_template_hash

    recorded = chat_template_hash(AutoTokenizer.from_pretrained(tokenizer_dir))
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4}))
    if how == "export":
        write_export_manifest(folder, "adapter", chat_template_sha256=recorded)
    else:  # a run's own adapter/ folder: its run.json records the template
        write_record(folder.parent, "torch", chat_template_sha256=recorded)


@pytest.mark.parametrize("how", ["export", "run"])
def test_an_adapter_trained_on_another_template_is_refused(tmp_path, tiny_gemma4_dir, tiny_gemma3_dir, fake_vllm, how):
    from crosstune.serve.template import check_trained_template

    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    same, other = tmp_path / "same" / "adapter", tmp_path / "other" / "adapter"
    _adapter_with_recorded_template(same, tiny_gemma4_dir, how)
    _adapter_with_recorded_template(other, tiny_gemma3_dir, how)
    assert check_trained_template(tiny_gemma4_dir, same) is None
    state = tmp_path / "state"
    args = ["serve", "start", str(tiny_gemma4_dir), "--adapter", str(other), "--state-dir", str(state)]
    line = one_line_error(cli(*args, "--port", str(free_port())))
    assert f"the chat template served from the base {tiny_gemma4_dir} (adapter {other})" in line
    assert "is not the one the run's data was prepared with" in line
    assert line.endswith("(pass --allow-template-mismatch to serve anyway)")
    assert not (state / "vllm.log").exists()


def test_a_damaged_config_json_is_one_line(tmp_path, tiny_gemma4_dir, fake_vllm):
    model = tmp_path / "model"
    shutil.copytree(tiny_gemma4_dir, model)
    (model / "config.json").write_text('{"model_type": "gemma4",')
    line = one_line_error(cli("serve", "start", str(model), "--state-dir", str(tmp_path / "s")))
    assert line.startswith(f"error: {model / 'config.json'}:1: not valid JSON: Expecting property name"), line
