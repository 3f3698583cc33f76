"""Starting a CLI child as a user's terminal would."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """preexec_fn for a child that is sent Ctrl-C: a shell starts background jobs (a CI runner's too) with SIGINT
    ignored, the child would inherit that and Python would never raise KeyboardInterrupt; a terminal's Ctrl-C
    reaches a process whose SIGINT is at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_9_when(proc, ready, timeout_s: float = 600.0, poll_s: float = 0.05) -> None:
    """SIGKILL `proc` (a subprocess.Popen) as soon as `ready()` is true, and wait for it; fails the test when the
    process ended first or `ready` never came true within `timeout_s`."""
    import time

    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline and proc.poll() is None:
            if ready():
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(poll_s)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the process ended before it could be killed"
