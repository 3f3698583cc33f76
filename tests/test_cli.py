"""The command line: --help lists the pipeline, doctor reports what this machine has."""

from typer.testing import CliRunner

from crosstune.cli import _register, app

_register()
runner = CliRunner()


def test_help_lists_pipeline_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "demo", "recipe", "data", "model"):
        assert command in result.output


def test_doctor_reports_stacks_and_devices():
    result = runner.invoke(app, ["doctor"], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2.13.0" in out  # torch
    assert "0.10.2" in out and "8 × cpu" in out  # jax sees the 8 fake devices from XLA_FLAGS
    assert "5.12.1" in out and "0.1.7" in out and "0.1.8" in out  # transformers, tunix, qwix
    assert "11.0" in out  # Debian's iverilog
    assert "vllm" in out
