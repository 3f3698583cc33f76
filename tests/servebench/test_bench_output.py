"""`bench serve --out`: it replaces only an earlier sweep of its own, unchanged (bench_manifest.json, the one manifest
shape of crosstune.ownership), refuses an --out that is or contains its input or names a file, writes through a temp
folder swapped into place (a failing rerun leaves the earlier sweep whole), and by default gives every sweep a
folder of its own."""

from __future__ import annotations

import json

from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import bench_args, cli, one_line_error

MANIFEST = "bench_manifest.json"  # crosstune.servebench.sweep_folder.MANIFEST, spelt out: the format users see
PLOTS = {"throughput_vs_load.png", "ttft_vs_context.png", "latency_vs_throughput.png", "pareto.png"}


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_sweep_writes_its_manifest_listing_every_file(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        result = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b")))
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert manifest["made_by"] == "crosstune bench serve" and manifest["complete"] is True
    assert set(manifest["files"]) == {"summary.json", "requests.jsonl", *PLOTS}
    summary = tmp_path / "b" / "summary.json"
    assert manifest["files"]["summary.json"] == {"sha256": _sha256(summary), "bytes": summary.stat().st_size}
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no temp folder left beside it


def test_out_holding_someone_elses_files_is_refused_and_untouched(tmp_path, tiny_gemma4_dir):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "summary.json").write_text('{"pass@1": 0.43}')  # an evaluation's summary
    with FakeOpenAI() as server:
        for extra in ([], ["--overwrite"]):
            line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), *extra)))
            assert (
                f"--out {out} holds files that are not crosstune bench serve's output: summary.json (no {MANIFEST}"
                in line
            )
    assert server.requests == []  # refused before anything was sent
    assert snapshot(out) == {"summary.json": b'{"pass@1": 0.43}'}


def test_an_earlier_sweep_is_replaced_only_with_overwrite_and_only_if_it_holds_nothing_else(tmp_path, tiny_gemma4_dir):
    out = tmp_path / "b"
    with FakeOpenAI() as server:
        assert cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out))).exit_code == 0
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out))))
        assert f"--out {out} holds an earlier output of crosstune bench serve: pass --overwrite" in line
        (out / "notes.txt").write_text("mine")
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), "--overwrite")))
        assert f"not crosstune bench serve's output: notes.txt (not in its {MANIFEST})" in line
        (out / "notes.txt").unlink()
        (out / "requests.jsonl").write_text("")  # emptied by hand
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), "--overwrite")))
        assert "requests.jsonl (changed since crosstune bench serve wrote it)" in line
        (out / "requests.jsonl").unlink()
        result = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), "--overwrite", "--label", "second"))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["label"] == "second"


def test_a_sweep_written_before_the_format_epoch_is_not_replaced(tmp_path, tiny_gemma4_dir):
    """Its manifest listed file names under `kind` (before crosstune.FORMAT_EPOCH's one shape): it proves nothing,
    so the folder is not the sweep's to replace, and stays as it is."""
    out = tmp_path / "b"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (out / MANIFEST).write_text(json.dumps({"kind": "crosstune bench serve", "files": ["summary.json"]}))
    before = snapshot(out)
    with FakeOpenAI() as server:
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), "--overwrite")))
    assert "summary.json" in line and f"its {MANIFEST} is not crosstune bench serve's" in line, line
    assert snapshot(out) == before


def test_a_failing_rerun_leaves_the_earlier_sweep_whole(tmp_path, tiny_gemma4_dir):
    out = tmp_path / "b"
    with FakeOpenAI() as server:
        assert cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out))).exit_code == 0
        before = snapshot(out)
        assert PLOTS <= set(before)
        failing = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(out), "--overwrite", model="error"))
    line = one_line_error(failing)
    assert "no request succeeded (context 16, concurrency 1: no successful request: 2 × HTTP 500" in line
    assert f"nothing was written ({out} is as it was)" in line
    assert snapshot(out) == before  # not one failed cell next to the old plots
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_the_default_out_is_a_new_folder_per_sweep(tmp_path, tiny_gemma4_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI() as server:
        for label in ("first", "second"):
            result = cli(*bench_args(server.url, tiny_gemma4_dir, "--label", label))
            assert result.exit_code == 0, result.output
    folders = sorted((tmp_path / "runs" / "bench").iterdir())
    assert [f.name.split("-")[0] for f in folders] == ["first", "second"]
    assert [json.loads((f / "summary.json").read_text())["label"] for f in folders] == ["first", "second"]


def test_out_that_is_or_contains_the_tokenizer_is_refused(tmp_path, tiny_gemma4_dir):
    import shutil

    tok = tmp_path / "models" / "tok"
    shutil.copytree(tiny_gemma4_dir, tok)
    before = snapshot(tok)
    with FakeOpenAI() as server:
        for out, verb in ((tok, "is"), (tmp_path / "models", "contains")):
            line = one_line_error(cli(*bench_args(server.url, tok, "--out", str(out), "--overwrite")))
            assert f"--out {out} {verb} the sweep's input {tok}: writing there would replace it" in line
    assert snapshot(tok) == before and server.requests == []


def test_out_naming_a_file_is_a_one_line_error(tmp_path, tiny_gemma4_dir):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    with FakeOpenAI() as server:
        assert f"--out {afile} is a file" in one_line_error(
            cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(afile)))
        )
        assert f"--out {afile / 'sub'} is inside {afile}, which is a file" in one_line_error(
            cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(afile / "sub")))
        )
    assert afile.read_text() == "keep me"
