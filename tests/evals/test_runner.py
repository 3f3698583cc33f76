"""What `crosstune eval --out DIR` may write over (crosstune.evals.runner, crosstune.ownership.owned_files): DIR may
hold others' files, which are left alone; a file at one of the evaluator's names is replaced only when
eval_manifest.json proves the evaluator wrote it (unchanged since, or claimed by a run killed while writing), else
refused by name before any work. The completion cache survives reruns and kill -9."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from crosstune.evals.generation.cache import CompletionCache
from tests.helpers.evals import eval_server, make_app
from tests.helpers.paths import FIXTURES, REPO
from tests.helpers.processes import kill_9_when

CHECKOUT = FIXTURES / "verilogeval"
MANIFEST = "eval_manifest.json"  # crosstune.evals.runner.EVAL_OUTPUT.manifest
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")


def _run(*args: str):
    return CliRunner(env={"COLUMNS": "400"}).invoke(make_app(), ["eval", *args], catch_exceptions=False)


def _references(out) -> list[str]:
    return ["--problems", str(CHECKOUT), "--references-only", "--problem", "Prob002_and2", "--out", str(out)]


def _tree(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_users_summary_in_out_is_left_alone_and_named(tmp_path):
    (tmp_path / "summary.md").write_text("# my own summary")
    (tmp_path / "summary.json").write_text('{"pass@1": 0.9}')
    (tmp_path / "notes.txt").write_text("mine")
    result = _run(*_references(tmp_path))
    assert result.exit_code == 1, result.output
    assert (
        f"--out {tmp_path} holds files that are not crosstune eval's output: summary.json, summary.md (no {MANIFEST} "
        "lists it); it writes only over what it wrote itself: move them out or choose another --out"
    ) in " ".join(result.output.split())
    mine = {"notes.txt": b"mine", "summary.json": b'{"pass@1": 0.9}', "summary.md": b"# my own summary"}
    assert _tree(tmp_path) == mine


@needs_iverilog
def test_a_rerun_replaces_its_own_reports_beside_a_users_files_and_refuses_an_edited_one(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")  # someone else's file: never touched, never in the way
    assert _run(*_references(tmp_path)).exit_code == 0
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["made_by"] == "crosstune eval" and "writing" not in manifest
    assert sorted(manifest["files"]) == ["reference_counts.json", "samples.jsonl", "summary.json", "summary.md"]
    summary = (tmp_path / "summary.json").read_bytes()
    assert manifest["files"]["summary.json"] == {"sha256": hashlib.sha256(summary).hexdigest(), "bytes": len(summary)}
    assert _run(*_references(tmp_path)).exit_code == 0  # its own, unchanged: replaced
    (tmp_path / "summary.md").write_text("edited by hand")
    result = _run(*_references(tmp_path))
    assert result.exit_code == 1
    assert "summary.md (changed since crosstune eval wrote it)" in " ".join(result.output.split())
    assert (tmp_path / "summary.md").read_text() == "edited by hand" and (tmp_path / "notes.txt").read_text() == "mine"


def test_a_failed_start_leaves_no_trace(tmp_path):
    result = _run("--problems", str(CHECKOUT), "--references-only", "--problem", "Nope*", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "no problem matches" in result.output
    assert not (tmp_path / "o").exists()


KILLED_EVAL = "import sys; from crosstune.cli import main; sys.argv[0] = 'crosstune'; main()"


@needs_iverilog
def test_kill_9_mid_generation_resumes_from_the_cache_it_claimed(tmp_path):
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob002_and2",
        "--endpoint",
        "URL",
        "--model",
        "m",
        "--n",
        "3",
        "--concurrency",
        "1",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with eval_server(lambda seed: "ok" if seed == 0 else "stall") as server:
        args = [a.replace("URL", server.url) for a in argv]
        process = subprocess.Popen(
            [sys.executable, "-c", KILLED_EVAL, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        kill_9_when(process, lambda: len(server.seeds) >= 2, timeout_s=120)  # sample 0 cached, sample 1 hangs
    claimed = json.loads((out / MANIFEST).read_text())
    assert "completions.jsonl" in claimed["writing"] and len(CompletionCache(out / "completions.jsonl")) == 1
    with eval_server() as server:
        result = _run(*[a.replace("URL", server.url) for a in argv[1:]])
    assert result.exit_code == 0, result.output
    assert sorted(server.seeds) == [1, 2]  # only the missing samples were asked for
    manifest = json.loads((out / MANIFEST).read_text())
    assert "writing" not in manifest and "completions.jsonl" in manifest["files"]
    assert len(CompletionCache(out / "completions.jsonl")) == 3
