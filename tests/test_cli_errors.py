"""Expected failures end in one line that says what to do and exit 1: never a traceback."""

from __future__ import annotations

import errno

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.data import TINY, tiny_args
from tests.helpers.paths import REPO

_register()
runner = CliRunner()


def fails_cleanly(args: list[str], *expected: str, code: int = 1) -> str:
    """Run the CLI in-process; an exception escaping the top-level handler would show as result.exception."""
    result = runner.invoke(app, [str(a) for a in args], terminal_width=400)
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not an uncaught exception
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for text in expected:
        assert text in result.output, result.output
    return result.output


def test_recipe_that_is_not_utf8(tmp_path):
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes(TINY.read_bytes().replace(b"name: tiny-cpu", b"name: caf\xe9"))
    line = TINY.read_text().splitlines().index("name: tiny-cpu") + 1
    fails_cleanly(["data", "prepare", recipe], f"{recipe}:{line}", "invalid UTF-8 at byte", "save the file as UTF-8")


def test_yaml_error_inside_set(tmp_path):
    fails_cleanly(["train", TINY, "--set", "lora.targets=[q, v"], "--set 'lora.targets=[q, v'", "not valid YAML")


def test_corrupt_config_json_in_the_model_folder(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gemma4_text", ')
    fails_cleanly(
        ["data", "prepare", TINY, "--set", f"model.path={model}"],
        "model.path",
        f"{model / 'config.json'}:1: not valid JSON: Expecting property name enclosed in double quotes (column 31)",
    )


def test_corrupt_run_json(tmp_path, tiny_gemma4_dir):
    from tests.helpers.export import torch_run

    run = torch_run(tmp_path / "run", tiny_gemma4_dir, "gemma4")
    (run / "run.json").write_text('{"family": "gem')
    fails_cleanly(
        ["export", run, "--to", "adapter", "--out", tmp_path / "out"],
        f"{run / 'run.json'}:1: not valid JSON: Unterminated string",
        "train the run again",
    )
    assert not (tmp_path / "out").exists()


def test_truncated_adapter(tmp_path, tiny_gemma4_dir):
    from tests.helpers.export import torch_run

    run = torch_run(tmp_path / "run", tiny_gemma4_dir, "gemma4")
    weights = run / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    fails_cleanly(["export", run, "--to", "merged", "--out", tmp_path / "out"], f"{weights}: header of")


def test_garbage_parquet_file(tmp_path, tiny_gemma4_dir):
    garbage = tmp_path / "train.parquet"
    garbage.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    fails_cleanly(
        [
            "data",
            "prepare",
            TINY,
            "--set",
            f"model.path={tiny_gemma4_dir}",
            "--set",
            f"data.sources=[{{path: {garbage}}}]",
        ],
        f"{garbage}: not a readable Parquet file",
    )


@pytest.fixture(scope="module")
def prepared_tiny(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir) -> list[str]:
    """CLI args for the tiny recipe with its data prepared (200 synthetic records)."""
    args = tiny_args(tiny_gemma4_dir, synth_corpus_dir, tmp_path_factory.mktemp("prepared"))
    result = runner.invoke(app, ["data", "prepare", *args])
    assert result.exit_code == 0, result.output
    return args


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_batch_larger_than_the_rows(backend, prepared_tiny, tmp_path):
    fails_cleanly(
        ["train", *prepared_tiny, "--backend", backend, "--run-dir", tmp_path / "run"]
        + ["--set", "train.per_device_batch_size=4096"],
        "can't fill one micro-batch",
        "lower train.per_device_batch_size or train.grad_accumulation, or add training data",
    )


def _disk_full(path):
    def write(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    return write


def test_disk_full_during_prepare(tmp_path, monkeypatch, tiny_gemma4_dir, synth_corpus_dir):
    import crosstune.data.prepared

    out = tmp_path / "out"
    monkeypatch.setattr(crosstune.data.prepared, "save_stats", _disk_full(out / "stats.json"))
    fails_cleanly(["data", "prepare", *tiny_args(tiny_gemma4_dir, synth_corpus_dir, out)], "disk full writing")
    assert not (out / "data").exists() and not list(out.glob(".data.tmp-*"))  # nothing half-written stays


def test_disk_full_during_export(tmp_path, monkeypatch, tiny_gemma4_dir):
    import crosstune.export.run_export
    from tests.helpers.export import torch_run

    run = torch_run(tmp_path / "run", tiny_gemma4_dir, "gemma4")
    monkeypatch.setattr(crosstune.export.run_export, "write_manifest", _disk_full(tmp_path / "export_manifest.json"))
    output = fails_cleanly(["export", run, "--to", "adapter", "--out", tmp_path / "out"], "disk full writing")
    assert "free space there" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no partial export, no temp folder


def test_mistyped_hf_model_path(tmp_path, synth_corpus_dir):
    missing = tmp_path / "exprot" / "merged"
    output = fails_cleanly(
        ["eval", "--problems", synth_corpus_dir / "eval", "--out", tmp_path / "ev", "--hf-model", missing],
        f"--hf-model {missing} does not exist",
    )
    assert "huggingface.co" not in output


def test_out_naming_an_existing_file(tmp_path, synth_corpus_dir):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    fails_cleanly(
        ["eval", "--problems", synth_corpus_dir / "eval", "--out", afile, "--references-only"],
        f"--out {afile} is a file",
    )
    assert afile.read_text() == "keep me"


def _handled_app():
    """A two-command app under the real top-level handler, raising what it is told to."""
    import typer

    from crosstune.cli import _ExpectedFailures
    from crosstune.errors import CrosstuneError

    errors = {
        "expected": CrosstuneError("x.yaml:3: wrong (do this)"),
        "bug": ZeroDivisionError("a bug"),
        "missing": FileNotFoundError(errno.ENOENT, "No such file", "f"),
        "ctrl-c": KeyboardInterrupt(),
    }
    handled = typer.Typer(cls=_ExpectedFailures)

    @handled.command()
    def fail(kind: str) -> None:
        raise errors[kind]

    @handled.command()
    def ok() -> None:
        pass

    return handled


def test_handler_prints_every_failure_in_one_line(tmp_path, monkeypatch):
    """Expected failures are their message; an OSError its path and why; a bug (a traceback once)
    one line naming the crash file that holds its traceback (tests/test_cli_failures.py has the rest)."""
    monkeypatch.setenv("CROSSTUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("CROSSTUNE_DEBUG", raising=False)
    handled = _handled_app()
    result = runner.invoke(handled, ["fail", "expected"])
    assert (result.exit_code, result.output) == (1, "error: x.yaml:3: wrong (do this)\n")
    bug = runner.invoke(handled, ["fail", "bug"])
    (crash,) = (tmp_path / "crashes").iterdir()
    assert bug.exit_code == 1 and bug.output.startswith("error: a bug in crosstune: ZeroDivisionError: a bug; its ")
    assert f"traceback is in {crash}" in bug.output and "ZeroDivisionError: a bug" in crash.read_text()
    missing = runner.invoke(handled, ["fail", "missing"])
    assert (missing.exit_code, missing.output) == (1, "error: f: No such file: check the path\n")
    interrupted = runner.invoke(handled, ["fail", "ctrl-c"])
    assert interrupted.exit_code == 130 and "interrupted" in interrupted.output


def _exits(node) -> bool:
    """`raise typer.Exit(...)`, `raise SystemExit(...)` or `sys.exit(...)` somewhere under `node`."""
    import ast

    for n in ast.walk(node):
        call = n.exc if isinstance(n, ast.Raise) else n
        f = call.func if isinstance(call, ast.Call) else call
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if (isinstance(n, ast.Raise) and name in ("Exit", "SystemExit")) or (
            isinstance(n, ast.Call) and name == "exit"
        ):
            return True
    return False


def own_error_exits(src) -> list[str]:
    """file:line of every CLI module (`cli.py`, `*_cli.py`, doctor.py; not the top-level crosstune/cli.py) that
    reports an error itself: an `except` that exits, a printed "error:" line, typer.BadParameter (a refusal typer
    could not know is a CrosstuneError: exit 1, one line) or an exit status of 2 (typer's own usage errors only)."""
    import ast

    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel == "cli.py" or not (path.stem == "cli" or path.stem.endswith("_cli") or rel == "doctor.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ExceptHandler) and _exits(node):
                found.append(f"{where}: an except that exits")
            elif isinstance(node, ast.Attribute) and node.attr == "BadParameter":
                found.append(f"{where}: typer.BadParameter")
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Exit":
                codes = [*node.args, *(k.value for k in node.keywords if k.arg == "code")]
                if any(isinstance(c, ast.Constant) and c.value == 2 for c in codes):
                    found.append(f"{where}: exit 2")
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("print", "echo"):
                parts = [c for a in node.args for c in (a.values if isinstance(a, ast.JoinedStr) else [a])]
                texts = [c.value for c in parts if isinstance(c, ast.Constant)]  # the text, not what is formatted in
                if any(
                    isinstance(t, str) and ("[red]error" in t.lower() or t.lower().startswith("error")) for t in texts
                ):
                    found.append(f"{where}: prints an error")
    return sorted(set(found))


def test_no_cli_module_reports_an_error_itself():
    """The one top-level handler (crosstune.cli) prints every expected failure: no command catches an error to print
    it and exit, refuses an option through typer.BadParameter or exits 2. A command's verdict (plan refused, parity
    failed, a recipe with problems) is its output, and its exit status says so."""
    assert own_error_exits(REPO / "src" / "crosstune") == []


def test_the_error_scan_finds_a_command_reporting_its_own_error(tmp_path):
    (tmp_path / "area").mkdir()
    (tmp_path / "area" / "cli.py").write_text(
        "import typer\n\n\ndef run():\n    try:\n        go()\n    except ValueError as e:\n"
        "        err.print(f'[red]error:[/red] {e}')\n        raise typer.Exit(1) from None\n"
        "    if bad:\n        raise typer.BadParameter('no', param_hint='--x')\n    raise typer.Exit(code=2)\n"
    )
    (tmp_path / "area" / "plan_cli.py").write_text(
        "import typer\n\n\ndef run(ok):\n    raise typer.Exit(0 if ok else 1)\n"
    )
    assert own_error_exits(tmp_path) == [
        "area/cli.py:11: typer.BadParameter",
        "area/cli.py:12: exit 2",
        "area/cli.py:7: an except that exits",
        "area/cli.py:8: prints an error",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("damaged", ["every file", "data files"])
def test_damaged_orbax_checkpoint(damaged, tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """Resume from a checkpoint whose every file (or every tensor data file, metadata intact) is garbage: one line
    naming it, and none of the dozens of "Event loop is closed" tracebacks tensorstore printed when its reads
    finished after Orbax closed its event loop (a subprocess: they came at any time until the process ended)."""
    import os
    import random
    import subprocess
    import sys

    from tests.helpers.export import jax_run

    run = tmp_path / "run"
    jax_run(run, tiny_gemma4_dir, "gemma4", step=2)
    rng = random.Random(0)
    for f in (run / "checkpoints").rglob("*"):
        if f.is_file() and (damaged == "every file" or "/d/" in str(f) or f.name == "manifest.ocdbt"):
            f.write_bytes(rng.randbytes(max(f.stat().st_size, 16)))
    args = [*tiny_args(tiny_gemma4_dir, synth_corpus_dir, tmp_path), "--backend", "jax", "--run-dir", run, "--resume"]
    command = [sys.executable, "-c", "from crosstune.cli import main; main()", "train", *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output and "Event loop is closed" not in output and "ERROR:absl" not in output, output
    assert f"error: {run / 'checkpoints' / '2'}: the Orbax checkpoint can't be restored" in output
    assert "move that folder aside, or train into a new --run-dir" in output
