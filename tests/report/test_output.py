"""`report --out` loses nothing of the user's: only an earlier report is replaced, whole;
an --out that is or holds an input, or that names a file, is refused before any work; a failure keeps the old one."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crosstune.report.writer as report_module
from crosstune.errors import InputError
from crosstune.report.inputs import ReportError
from crosstune.report.writer import write_report
from tests.helpers.report import GPU_SWEEP, write_eval, write_run

MANIFEST = ".crosstune-report.json"  # crosstune.report.report_folder.MANIFEST


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def inputs(tmp_path) -> list[Path]:
    run = write_run(tmp_path / "in", "torch", "2xh100")
    return [run, write_eval(tmp_path / "in" / "eval", {"p1": "....R"}), GPU_SWEEP]


def test_a_folder_of_user_files_is_refused_and_keeps_them(tmp_path, inputs):
    out = tmp_path / "mine"
    (out / "charts").mkdir(parents=True)
    (out / "charts" / "figure1.png").write_bytes(b"my figure")
    (out / "report.md").write_text("my notes")
    before = _tree(out)
    with pytest.raises(
        ReportError,
        match=rf"--out {out} holds files that are not crosstune report's output: charts/figure1.png, "
        rf"report.md \(no \{MANIFEST} lists it\)",
    ):
        write_report(inputs, out)
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp folder left


def test_an_earlier_report_is_replaced_whole_and_only_it(tmp_path, inputs):
    out = tmp_path / "report"
    write_report(inputs, out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["made_by"] == "crosstune report"
    assert sorted(manifest["files"]) == sorted(p for p in _tree(out) if p != MANIFEST)
    (out / "charts" / "old-chart.png").write_bytes(b"x")  # a file the report did not write: never deleted
    with pytest.raises(InputError, match=rf"report's output: charts/old-chart.png \(not in its \{MANIFEST}\)"):
        write_report(inputs, out)
    (out / "charts" / "old-chart.png").unlink()
    (out / "report.md").write_text("edited by hand")
    with pytest.raises(InputError, match=r"report.md \(changed since crosstune report wrote it\)"):
        write_report(inputs[:1], out)
    assert (out / "report.md").read_text() == "edited by hand"
    (out / "report.md").unlink()
    write_report(inputs[:1], out)  # runs only: the evaluation's and sweep's charts of the earlier report go
    assert sorted(p.name for p in (out / "charts").iterdir()) == ["loss.png", "throughput.png"]


def test_a_report_written_before_the_one_manifest_shape_is_replaced(tmp_path, inputs):
    """Its manifest listed {file: sha256} under made_by: the files are still proven by their hashes."""
    out = tmp_path / "report"
    write_report(inputs, out)
    manifest = json.loads((out / MANIFEST).read_text())
    old = {"made_by": "crosstune report", "files": {rel: entry["sha256"] for rel, entry in manifest["files"].items()}}
    (out / MANIFEST).write_text(json.dumps(old))
    (out / "report.md").write_text("edited by hand")
    with pytest.raises(InputError, match=r"report.md \(changed since crosstune report wrote it\)"):
        write_report(inputs, out)
    (out / "report.md").unlink()
    write_report(inputs, out)
    assert json.loads((out / MANIFEST).read_text())["format"] == 1


def test_a_failure_while_writing_keeps_the_earlier_report(tmp_path, inputs, monkeypatch):
    out = tmp_path / "report"
    write_report(inputs, out)
    before = _tree(out)

    def broken(doc):
        raise RuntimeError("disk trouble")

    monkeypatch.setattr(report_module, "to_html", broken)
    with pytest.raises(RuntimeError, match="disk trouble"):
        write_report(inputs[:1], out)
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("where", ["run", "parent", "eval"])
def test_an_out_that_is_or_holds_an_input_is_refused(tmp_path, inputs, where):
    out = {"run": inputs[0], "parent": tmp_path / "in", "eval": inputs[1]}[where]
    before = _tree(tmp_path / "in")
    verb = "contains" if where == "parent" else "is"
    with pytest.raises(InputError, match=rf"--out {out} {verb} the report's input .*: writing there would replace it"):
        write_report(inputs, out)
    assert _tree(tmp_path / "in") == before


def test_an_out_naming_a_file_is_one_line(tmp_path, inputs):
    from crosstune.cli import _register, app

    _register()
    target = tmp_path / "report.html"
    target.write_text("not a folder")
    for out, why in ((target, "is a file"), (target / "sub", f"is inside {target}, which is a file")):
        result = CliRunner().invoke(app, ["report", *map(str, inputs), "--out", str(out)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output  # no traceback
        assert f"--out {out} {why}: give a folder (it is created if missing)" in result.output
        assert "Traceback" not in result.output and target.read_text() == "not a folder"
