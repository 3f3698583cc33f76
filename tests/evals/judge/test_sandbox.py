"""The process sandbox on plain shell commands: wall kill of the whole group, output cap, file-size limit,
minimal environment, and Landlock confinement where the kernel has it."""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from crosstune.evals.judge import sandbox
from crosstune.evals.judge.landlock import abi_version
from crosstune.evals.judge.sandbox import Limits

NO_LANDLOCK = Limits(landlock=False)


def _in_worker(env: dict[str, str], *args):
    os.environ.update(env)
    return sandbox.run_limited(*args)


def run_limited(*args, env: dict[str, str] | None = None):
    """As the evaluator does: from a single-threaded forkserver worker, never from this (maybe JAX-threaded)
    test process, where sandbox.py's preexec_fn would fork a multithreaded process."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        return pool.submit(_in_worker, env or {}, *args).result()


def test_timeout_kills_the_whole_process_group(tmp_path):
    start = time.monotonic()
    result = run_limited(["sh", "-c", "sleep 30 & echo $! > bg.pid; sleep 30"], tmp_path, NO_LANDLOCK, 0.5)
    assert result.limit == "timeout" and time.monotonic() - start < 15  # not the 30 s sleep, however loaded the box
    background = int((tmp_path / "bg.pid").read_text())
    time.sleep(0.1)
    assert process_state(background) in (None, "Z")  # the grandchild died with the group (dead or unreaped)


def process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_output_is_capped_and_the_flood_stopped(tmp_path):
    result = run_limited(["yes"], tmp_path, Limits(output_kib=64, landlock=False), 10)
    assert result.limit == "output" and len(result.output) == 64 * 1024 and result.wall_s < 5


def test_file_size_limit(tmp_path):
    limits = Limits(file_size_mib=1, landlock=False)
    result = run_limited(["sh", "-c", "exec head -c 3000000 /dev/zero > big"], tmp_path, limits, 10)
    assert result.limit == "file_size"
    assert (tmp_path / "big").stat().st_size <= 1024 * 1024


def test_minimal_environment_and_cwd(tmp_path):
    env = {"CROSSTUNE_SECRET_TOKEN": "do-not-pass-on"}
    result = run_limited(["sh", "-c", "env; pwd"], tmp_path, NO_LANDLOCK, 10, env=env)
    assert "CROSSTUNE_SECRET_TOKEN" not in result.output
    assert f"TMPDIR={tmp_path}" in result.output and result.output.strip().endswith(str(tmp_path))
    assert result.returncode == 0 and result.limit is None


@pytest.mark.skipif(abi_version() < 1, reason="kernel without Landlock")
def test_landlock_confines_reads_and_writes(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("hidden")
    script = f"echo x > {outside}/w.txt; echo y > ../up.txt; cat {outside}/secret.txt; echo z > in.txt; echo done"
    result = run_limited(["sh", "-c", script], work, Limits(), 10)
    assert result.landlocked and "done" in result.output and "hidden" not in result.output
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (tmp_path / "up.txt").exists() and (work / "in.txt").read_text() == "z\n"
    assert Path("/usr/bin/sh").exists() or Path("/bin/sh").exists()  # tools stay executable
