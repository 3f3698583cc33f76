"""Options are checked before any work starts: a wrong one is one line naming it, exit 1, and nothing runs or is
written (`plan --backend tpu` printed "plan ok"; `study --backend tpu` ran two stages and locked the bundle to "tpu";
`--only ''` ran all eight stages; `launch --nodes 0` became 1; `TPU_WORKER_ID=abc` was a traceback)."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.paths import RECIPES, REPO

_register()


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner(env=env).invoke(app, list(args), terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "\n" not in result.output.strip(), result.output
    return result.output.strip()


def test_plan_refuses_a_backend_that_is_not_one(tmp_path):
    said = refused("plan", str(RECIPES / "tiny-cpu.yaml"), "--backend", "tpu")
    assert said == "error: --backend 'tpu': one of torch, jax"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "tpu"], "error: --backend 'tpu': one of torch, jax"),
        (["--only", ""], "error: --only names no stage: give one or more of prepare, plan, train, export, serve,"),
        (["--only", ","], "error: --only names no stage: give one or more of prepare, plan, train, export, serve,"),
        (["--only", " , "], "error: --only names no stage"),
        (["--from", ""], "error: unknown stage '': the stages are prepare, plan"),
    ],
)
def test_study_refuses_wrong_options_before_anything_runs(tmp_path, args, message):
    bundle = tmp_path / "bundle"
    said = refused("study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), *args)
    assert said.startswith(message), said
    assert not bundle.exists()  # not claimed: no bundle.json, so no backend recorded


@pytest.mark.parametrize("variable", ["TPU_WORKER_ID", "JAX_PROCESS_ID"])
@pytest.mark.parametrize("value", ["abc", "-1", "1.5"])
def test_a_process_index_that_is_not_one_is_one_line_naming_the_variable(tmp_path, variable, value):
    bundle = tmp_path / "bundle"
    said = refused(
        "study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), "--only", "plan", env={variable: value}
    )
    assert said == (
        f"error: {variable}={value!r}: not a process index (an integer >= 0, 0 = the lead): unset it or "
        "give this host's index"
    )
    assert not bundle.exists()


def test_launch_refuses_zero_nodes(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "s.sbatch"
    said = refused("launch", "recipes/gemma4-31b-2xh100.yaml", "--on", "slurm", "--nodes", "0", "--out", str(out))
    assert said == "error: --nodes: 0 is not a whole number >= 1 and <= 4,096 (hosts)"
    assert not out.exists()


def test_every_numeric_option_has_a_declared_bound_and_no_other():
    """crosstune.bounds.OPTIONS bounds each int and float option of every command (the command line checks them as
    it parses, before any work); none carries typer's own min/max, so the table is the one place."""
    import typer

    from crosstune.bounds import option_bound
    from crosstune.cli import numeric_options

    found = list(numeric_options(typer.main.get_command(app)))
    assert len(found) > 60  # the walk reaches every sub-app's commands (eval, cost tco, bench serve, ...)
    assert [f"{cmd} {p.opts[0]}" for cmd, p in found if option_bound(cmd, p.opts[0]) is None] == []
    assert [f"{cmd} {p.opts[0]}" for cmd, p in found if p.min is not None or p.max is not None] == []


def test_the_bound_walk_finds_an_unbounded_option():
    import typer

    from crosstune.bounds import option_bound
    from crosstune.cli import numeric_options

    sub = typer.Typer()

    @sub.command("go")
    def go(count: int = typer.Option(1, "--count"), seed: int = typer.Option(0, "--seed"), name: str = "x") -> None:
        """Two numeric options: --count is in no table, --seed is."""

    top = typer.Typer()
    top.add_typer(sub, name="thing")
    top.command("other")(lambda: None)
    found = [(cmd, p.opts[0]) for cmd, p in numeric_options(typer.main.get_command(top))]
    assert found == [("thing go", "--count"), ("thing go", "--seed")]
    assert [option_bound(*f) is None for f in found] == [True, False]


TP = "is not a whole number >= 1 and <= 1,024 (tensor-parallel ranks)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "plan", "TINY", "--tp", "0"], f"error: --tp: 0 {TP}"),
        (["serve", "plan", "TINY", "--tp", "-1"], f"error: --tp: -1 {TP}"),
        (
            ["bench", "serve", "--endpoint", "http://127.0.0.1:9", "--num-requests", "100000000"],
            "error: --num-requests: 100000000 is not a whole number >= 1 and <= 100,000 (requests per cell)",
        ),
        (
            ["bench", "serve", "--endpoint", "http://127.0.0.1:9", "--num-requests", "2147483648"],
            "error: --num-requests: 2147483648 is not a whole number >= 1 and <= 100,000 (requests per cell)",
        ),
        (
            ["model", "build", "--family", "gemma4", "--vocab", "1000000000", "--out", "OUT"],
            "error: --vocab: 1000000000 is not a whole number >= 16 and <= 262,144 (tokens in the vocabulary, at most "
            "Gemma's 262,144)",
        ),
        (
            ["bench", "serve", "--endpoint", "http://127.0.0.1:9", "--repeats", "100000"],
            "error: --repeats: 100000 is not a whole number >= 1 and <= 100 (runs of the grid)",
        ),
        (
            [
                "bench",
                "serve",
                "--endpoint",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--tokenizer",
                "OUT",
                "--contexts",
                "16,1000000000000",
                "--out",
                "OUT",
            ],
            "error: --contexts '16,1000000000000': 1000000000000 is above 10,000,000 (prompt tokens)",
        ),
        (
            [
                "bench",
                "serve",
                "--endpoint",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--tokenizer",
                "OUT",
                "--rates",
                "1e9",
                "--out",
                "OUT",
            ],
            "error: --rates '1e9': 1e9 is above 1,000,000 requests per second",
        ),
        (
            ["cost", "what-if", "--target", "2xh100", "--tokens", "9.2e6", "--mfu", "nan"],
            "error: --mfu: nan is not a finite number > 0 and <= 1 (a fraction of the bf16 peak)",
        ),
        (
            ["eval", "--references-only", "--problems", "OUT", "--out", "OUT", "--shots", "4"],
            "error: --shots: 4 is not a whole number >= 0 and <= 3 (examples in the prompt)",
        ),
    ],
    ids=[
        "tp-0",
        "tp-negative",
        "num-requests",
        "num-requests-2-31",
        "vocab",
        "repeats",
        "contexts",
        "rates",
        "mfu-nan",
        "shots",
    ],
)
def test_a_number_out_of_bounds_is_refused_before_any_work(tmp_path, args, message):
    """`serve plan --tp 0` became 8 and `--tp -1` said "raise tp"; `bench serve --num-requests 100000000` built the
    workload before any cell could time out."""
    out = tmp_path / "out"
    args = [str(RECIPES / "tiny-cpu.yaml") if a == "TINY" else str(out) if a == "OUT" else a for a in args]
    start = time.monotonic()
    assert refused(*args) == message
    assert time.monotonic() - start < 10 and not out.exists()


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (
            "1000000000",
            "--layers: 1000000000 is not a whole number >= 1 and <= 1,024 (decoder layers, at most the size's)",
        ),
        ("61", "--layers 61: a gemma4 31b has 60 layers: give at most 60"),
    ],
    ids=["a-billion", "past-the-size"],
)
def test_model_build_layers_beyond_the_size_is_refused_before_anything_is_allocated(tmp_path, layers, message):
    """In a child held to 2 GiB of address space: a billion layers allocated until the kernel killed it, and 61 built
    the whole 31b and more (held so, the old code fails with a MemoryError instead of taking the machine down)."""
    import resource
    import subprocess
    import sys

    from crosstune.units import GIB

    def held() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))

    args = ["model", "build", "--family", "gemma4", "--size", "31b", "--layers", layers, "--out", tmp_path / "m"]
    done = subprocess.run(
        [sys.executable, "-m", "crosstune.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=held,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "m").exists()


def test_model_build_of_a_size_this_machine_can_t_hold_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    """`--size 31b` without --layers allocated 62 GB (bf16; 123 GB in float32) without asking the machine."""
    from typer.testing import CliRunner

    from crosstune.cli import _register, app
    from crosstune.models import build

    _register()
    monkeypatch.setattr(build, "available_bytes", lambda: 24 << 30)
    out = tmp_path / "m"
    done = CliRunner().invoke(app, ["model", "build", "--family", "gemma4", "--size", "31b", "--out", str(out)])
    line = " ".join(done.output.split())
    assert done.exit_code == 1, done.output
    assert "gemma-4-31b (30,697,345,280 parameters) needs about 122.8 GB to build in bfloat16" in line
    assert "this machine has 25.8 GB available: give --layers (e.g. --layers 2: " in line
    assert not out.exists()
    assert build.memory_problem(build.sized_spec("gemma4", "31b", layers=2), "float32") is None
