"""The report people look at: the compared thing is the colour, legends are readable, ticks sit
at the measured values, every colour stands out on white, coinciding loss curves both show, pass@k has a chart,
report.md renders hostile names as text, and tables printed to a pipe are whole."""

import io
import json
import os
import subprocess
import sys

import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest
from markdown_it import MarkdownIt

from crosstune.report import plots
from crosstune.report.inputs import read_inputs
from crosstune.report.writer import write_report
from crosstune.run.run_summary import read_run
from crosstune.servebench.summary_cells import read_sweep
from tests.helpers.paths import REPO
from tests.helpers.report import GPU_SWEEP, TPU_SWEEP, write_demo_evals, write_run


def _contrast_on_white(colour: str) -> float:
    """WCAG 2 contrast ratio of `colour` against white."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in matplotlib.colors.to_rgb(colour)]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 1.05 / (luminance + 0.05)


def test_every_colour_stands_out_on_white():
    """3:1 is WCAG's minimum for graphics; viridis' yellow end, used for the longest context before, is 1.2:1."""
    assert min(_contrast_on_white(c) for c in plots.PALETTE) >= 3.0
    assert _contrast_on_white(matplotlib.colormaps["viridis"](1.0)) < 1.3
    assert len(set(plots.PALETTE)) == len(plots.PALETTE)


def _lines(fig) -> list:
    return [line for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_serving_chart_colours_the_sweeps_and_ticks_the_measured_loads():
    from crosstune.report import serving_plots

    sweeps = [read_sweep(TPU_SWEEP), read_sweep(GPU_SWEEP)]
    fig = serving_plots.serving_figure(sweeps)
    colours = {s.label: {line.get_color() for line in _lines(fig) if line.get_label() == s.label} for s in sweeps}
    assert colours == {sweeps[0].label: {plots.PALETTE[0]}, sweeps[1].label: {plots.PALETTE[1]}}  # colour = sweep
    assert [ax.get_title() for ax in fig.axes[:4]] == [f"context {c:,} tokens" for c in (1024, 2048, 4096, 8192)]
    measured = sorted({c.concurrency for s in sweeps for c in s.cells})
    for ax in fig.axes:
        assert list(ax.get_xticks()) == measured
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(c) for c in measured]  # "8", not "2³"
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [s.label for s in sweeps]
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 9
    fig = serving_plots.contexts_figure(sweeps)
    for ax in fig.axes:
        assert list(ax.get_xticks()) == [1024, 2048, 4096, 8192]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1024", "2048", "4096", "8192"]
        assert min(t.get_fontsize() for t in ax.get_legend().get_texts()) >= 9


def _pixels_near(png: bytes, colour: str, tolerance: float = 0.12) -> int:
    image = matplotlib.image.imread(io.BytesIO(png))[..., :3]
    return int((np.abs(image - np.array(matplotlib.colors.to_rgb(colour))).max(axis=-1) < tolerance).sum())


def test_two_coinciding_loss_curves_both_show(tmp_path):
    """The two backends' curves can be identical (same data, same numbers): each still shows, and the difference
    panel says they coincide."""
    runs = [read_run(write_run(tmp_path / b, b, "cpu")) for b in ("torch", "jax")]
    assert [r.loss for r in runs[0].rows] == [r.loss for r in runs[1].rows]
    fig = plots.loss_figure(runs, "same definition", True)
    main, diff = fig.axes
    first, second = main.get_lines()
    assert first.get_color() != second.get_color() and first.get_linestyle() != second.get_linestyle()
    assert first.get_marker() != second.get_marker()
    assert list(diff.get_lines()[1].get_ydata()) == [0.0] * 20
    png = plots.png(fig)
    assert _pixels_near(png, plots.PALETTE[0]) > 500 and _pixels_near(png, plots.PALETTE[1]) > 500  # both drawn
    assert min(t.get_fontsize() for t in main.get_legend().get_texts()) >= 9


def test_pass_at_k_has_a_chart_per_protocol(tmp_path):
    evals = write_demo_evals(tmp_path, {"base": "R" * 60, "lora": "." * 60}, {"base": "R" * 40, "lora": "." * 40})
    from crosstune.report.eval_groups import eval_groups

    groups = eval_groups(read_inputs(evals).evals)
    fig = plots.pass_at_k_figure(groups)
    assert [ax.get_title() for ax in fig.axes] == [g.title for g in groups] and len(groups) == 2
    heights = [[round(b.get_height()) for b in ax.patches] for ax in fig.axes]
    assert heights == [[0, 100], [0, 0, 100, 100]]  # greedy pass@1; sampled pass@1 and pass@5, per model
    colours = [[matplotlib.colors.to_hex(b.get_facecolor()).upper() for b in ax.patches] for ax in fig.axes]
    assert colours[0] == [plots.PALETTE[0], plots.PALETTE[1]]  # one colour per model, the same in both panels
    assert colours[1] == [plots.PALETTE[0], plots.PALETTE[0], plots.PALETTE[1], plots.PALETTE[1]]


HOSTILE = "<img src=x onerror=alert(1)> [click](http://evil.example) *bold* | $\\frac{"


def test_report_md_renders_hostile_names_as_text(tmp_path):
    run = write_run(tmp_path / "r", "torch", "2xh100")
    hostile_run = run.rename(run.with_name(HOSTILE.replace("/", "∕")))
    summary = json.loads(GPU_SWEEP.read_text()) | {"label": HOSTILE + "\n# heading\n- item"}
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(summary))
    name = HOSTILE.replace("/", "∕")
    evals = write_demo_evals(tmp_path / "e", {name: "." * 60}, {name: "." * 40})
    write_report([hostile_run, sweep, *evals], tmp_path / "out")  # matplotlib drew the `$` labels as text
    html = MarkdownIt("commonmark").enable("table").render((tmp_path / "out" / "report.md").read_text())
    assert "<img src=x" not in html and "<a href" not in html and "<em>bold</em>" not in html
    assert "<h1>heading" not in html and "<li>item" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 3  # the run, the sweep and the evaluation, as text
    tables = html.split("<table>")[1:]
    assert tables  # (the check below would pass on a report with none)
    for table in tables:  # every row has as many cells as the header: no `|` split a cell
        head, body = table.split("</thead>")[0], table.split("<tbody>")[1].split("</tbody>")[0]
        assert {row.count("<td>") for row in body.split("</tr>") if "<td>" in row} == {head.count("<th>")}
    images = [line for line in html.splitlines() if "<img" in line]
    assert images and all('src="charts/' in line for line in images)  # only the report's own charts


def test_tables_printed_to_a_pipe_are_whole():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "crosstune.cli", "cost", "serve", str(TPU_SWEEP), str(GPU_SWEEP)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "saturation" in line]
    assert len(rows) == 8 and all("TPU v6e-8 (vLLM TPU, tp=8)" in r or "2×H100 (vLLM, tp=2)" in r for r in rows)
    assert any("$/1M output tokens" in line for line in result.stdout.splitlines())  # the header in one piece
    assert max(len(line) for line in result.stdout.splitlines()) > 80


@pytest.mark.parametrize("n", [1, 3])
def test_the_loss_chart_has_a_difference_panel_only_with_two_runs_or_more(tmp_path, n):
    runs = [read_run(write_run(tmp_path / str(i), "torch", "cpu")) for i in range(n)]
    assert len(plots.loss_figure(runs, "s", True).axes) == (1 if n == 1 else 2)
