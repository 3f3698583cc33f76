"""The side-by-side report: content, red flags for inputs that can't be compared, and rendering in a real browser.

Inputs: small synthetic run directories with the trainers' field names (report_helpers.py; training real runs takes
about a minute here, so the real-run report is the `slow` test at the end), evaluator summaries written by the
evaluator's own code, and the recorded bench-summary fixtures in tests/fixtures/bench/.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.report.writer import write_report
from tests.helpers.report import GPU_SWEEP, TPU_SWEEP, served_by, write_eval, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _inputs(root: Path, tokenizer_hash_b: str = "t" * 64) -> list[Path]:
    a = write_run(root / "a", "jax", "tpu-v5p-8", step_time_s=1.0)
    b = write_run(root / "b", "torch", "2xh100", step_time_s=1.6, timing=False, tokenizer_hash=tokenizer_hash_b)
    e1 = write_eval(root / "eval-jax", {"p1": ".S..R", "p2": "RRRRR", "p3": "....."})
    e2 = write_eval(root / "eval-torch", {"p1": "..S.R", "p2": "RRTRR", "p3": "....C"})
    # each sweep declares the run it served, as `bench serve` of an export records it: TCO pairs by that
    return [a, b, e1, e2, served_by(a, TPU_SWEEP, root / "bench-tpu"), served_by(b, GPU_SWEEP, root / "bench-gpu")]


def test_report_has_every_section_chart_and_table(tmp_path):
    html = write_report(_inputs(tmp_path), tmp_path / "out")
    page, md = html.read_text(), (tmp_path / "out" / "report.md").read_text()
    charts = sorted(p.name for p in (tmp_path / "out" / "charts").glob("*.png"))
    assert charts == [
        "loss.png",
        "pass-at-k.png",
        "serving-contexts.png",
        "serving-pareto.png",
        "serving.png",
        "tco.png",
        "throughput.png",
        "verdicts.png",
    ]
    for name in charts:
        assert (tmp_path / "out" / "charts" / name).read_bytes().startswith(PNG_MAGIC)
        assert f"](charts/{name})" in md
    assert page.count('src="data:image/png;base64,') == len(charts)
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # self-contained: nothing fetched
    for title in (
        "Are the runs comparable?",
        "Training cost",
        "Serving",
        "Evaluation (VerilogEval pass@k)",
        "Total cost of ownership",
        "Prices used",
    ):
        assert f"<h2>{title}</h2>" in page and f"## {title}" in md
    # seed-style figures from the fixture sweeps: TTFT at 4096 (8 concurrent) 1443 / 61 ms, serving 41 % cheaper
    assert "TPU v6e-8 (vLLM TPU, tp=8) 23.66× lower" in md
    assert "| serving $ / 1M output tokens, ctx 4096 | $4.52 | $7.68 | TPU v6e-8 (vLLM TPU, tp=8) 1.70× cheaper |" in md
    assert "| eval-jax | not recorded | 15 | 53.3 % | 66.7 % |" in md  # pass@1 = (3/5 + 0 + 1) / 3; pass@5 = 2/3
    assert "| TCO, train once + 1 h of serving on each | GPU total / TPU total | 1.82× (seed: 1.82×) |" in md
    assert "NOT COMPARABLE" not in md  # same data, template and loss convention


def test_incomparable_runs_are_flagged_in_red(tmp_path):
    html = write_report(_inputs(tmp_path, tokenizer_hash_b="x" * 64), tmp_path / "out")
    page = html.read_text()
    assert page.count('<div class="note error">NOT COMPARABLE: the runs differ in chat-template hash') == 2
    assert '<tr class="flagged"><td>final loss</td>' in page
    md = (tmp_path / "out" / "report.md").read_text()
    assert "> **NOT COMPARABLE:** the runs differ in chat-template hash" in md


def test_a_different_loss_convention_is_flagged(tmp_path):
    a = write_run(tmp_path / "a", "jax", "tpu-v5p-8")
    b = write_run(tmp_path / "b", "torch", "2xh100", extra={"loss_convention": "full-sequence token-mean CE"})
    page = write_report([a, b], tmp_path / "out").read_text()
    assert "NOT COMPARABLE: the runs differ in loss convention" in page
    assert '<tr class="flagged"><td>loss convention</td>' in page


def test_unrecorded_hashes_are_a_warning_not_a_silent_pass(tmp_path):
    a = write_run(tmp_path / "a", "jax", "tpu-v5p-8")
    b = write_run(tmp_path / "b", "torch", "2xh100")
    shutil.rmtree(tmp_path / "b" / "data")
    page = write_report([a, b], tmp_path / "out").read_text()
    # run.json records the data hash; the tokenizer hash is the prepared data's manifest's alone
    assert "Warning: chat-template hash not recorded for torch · 2xh100 · tiny-torch: comparability unchecked" in page
    assert "data hash not recorded" not in page


def test_what_each_run_was_comes_from_the_record_never_a_guess(tmp_path):
    """Devices, mesh, global batch and accumulation are run.json's keys, the same for both backends: a global batch
    the recipe's per-device batch × accumulation would not give (train.global_batch_size decided it) is shown as
    recorded; a run written before the format epoch (run.json format 1) is refused in one line, not guessed at."""
    import json

    from crosstune.run.layout import RunDirError

    a = write_run(tmp_path / "a", "jax", "tpu-v5p-8", extra={"global_batch": 16, "grad_accumulation": 8})
    b = write_run(tmp_path / "b", "torch", "2xh100")
    write_report([a, b], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| global batch (rows) | 16 | 2 |" in md and "| gradient accumulation | 8 | 1 |" in md
    assert "| devices | 2 | 1 |" in md and "| mesh (fsdp × tp) | 1 × 2 | 1 × 1 |" in md
    assert "| platform | cpu | cpu |" in md and "| LoRA layout | 41 modules, " in md
    meta = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps(meta | {"format": 1}))
    with pytest.raises(RunDirError, match="run.json of format 1, written before crosstune"):
        write_report([a, b], tmp_path / "out2")


def test_different_eval_problem_sets_are_flagged(tmp_path):
    e1 = write_eval(tmp_path / "e1", {"p1": ".....", "p2": "RRRRR"})
    e2 = write_eval(tmp_path / "e2", {"p1": ".....", "p9": "RRRRR"})
    page = write_report([e1, e2], tmp_path / "out").read_text()
    assert (
        "NOT COMPARABLE: the evaluations of e1 and e2 differ in problem set: (&#x27;p1&#x27;, &#x27;p2&#x27;) vs"
        in page
    )


def test_cli_report_tco_and_errors(tmp_path):
    from crosstune.cli import _register, app

    _register()
    runner = CliRunner()
    inputs = [str(p) for p in _inputs(tmp_path)]
    result = runner.invoke(app, ["report", *inputs, "--out", str(tmp_path / "out"), "--slo", "p99_ttft_ms=1000"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "report.html").is_file()
    assert "no load at context 8192 meets the SLO" in (tmp_path / "out" / "report.md").read_text()
    workload = tmp_path / "workload.yaml"
    workload.write_text(f"""days: 30
serve_tokens_per_day: 10000000
context: 4096
options:
  measured:
    train: {{run: {inputs[0]}}}
    serve: {{bench: {TPU_SWEEP}}}
  assumed:
    train: {{target: 2xh100, tokens: 9.2e6, tokens_per_s: 486}}
    serve: {{target: 2xh100, output_tokens_per_s: 800}}
""")
    result = runner.invoke(app, ["cost", "tco", str(workload)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # assumed GPU: 9.2e6 / 486 / 3600 h × $22.12 + 30 × 10 × $22.12 / (800 × 3600) × 1e6
    assert "$2,420.48" in result.output and "assumed (assumed): 486 trained tokens/s on 2xh100" in result.output
    result = runner.invoke(app, ["cost", "train", str(tmp_path)])
    assert result.exit_code == 1 and "no run.json — not a crosstune run directory" in result.output


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Injected into a copy of the page: after load, count images that failed to decode and resources fetched from
# anywhere but the page itself, and write the counts into the DOM for --dump-dom to carry out.
PROBE = """<script>
let failed = 0;
window.addEventListener('error', () => { failed += 1; }, true);
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !i.complete || i.naturalWidth === 0).length;
  const fetched = performance.getEntriesByType('resource').filter(r => !r.name.startsWith('data:')).length;
  const s = document.createElement('div');
  s.id = 'probe';
  s.textContent = `images=${imgs.length} broken=${broken} widths=${imgs.map(i => i.naturalWidth).join(',')} ` +
    `tables=${document.querySelectorAll('table').length} flagged=${document.querySelectorAll('.note.error').length} ` +
    `fetched=${fetched} failed=${failed}`;
  document.body.appendChild(s);
});
</script>"""
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium: `make test-report` installs it")
def test_report_renders_in_headless_chromium(tmp_path):
    html = write_report(_inputs(tmp_path, tokenizer_hash_b="x" * 64), tmp_path / "out")
    probe = tmp_path / "probe.html"
    probe.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    browser = [_chromium(), *FLAGS]
    dom = subprocess.run(
        [
            *browser,
            f"--user-data-dir={tmp_path / 'profile-dom'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<div id="probe">([^<]*)</div>', dom.stdout)
    assert found, f"the probe never ran: {dom.stderr[-2000:]}"
    status = dict(item.split("=", 1) for item in found.group(1).split())
    assert int(status["images"]) == 8 and status["broken"] == "0" and status["failed"] == "0"
    assert all(int(w) >= 700 for w in status["widths"].split(","))  # every chart decoded at its drawn size
    assert int(status["tables"]) >= 12 and int(status["flagged"]) == 2 and status["fetched"] == "0"
    shot = tmp_path / "out" / "screenshot.png"
    subprocess.run(
        [
            *browser,
            f"--user-data-dir={tmp_path / 'profile-shot'}",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            html.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2400, 1280) and pixels.std() > 0.05  # a rendered page, not a blank one


@pytest.mark.slow
def test_report_from_real_torch_and_jax_runs(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """Both backends train the tiny recipe for 4 steps on the same prepared data; the report finds them comparable."""
    from crosstune.data import prepare_dataset
    from crosstune.train.session import train
    from tests.helpers.jax_recipes import tiny_recipe

    overrides = ["train.max_steps=4", "train.checkpoint_every=2", "data.subsample={size: 32, seed: 42}"]
    recipe = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "gemma4", *overrides)
    prepare_dataset(recipe)
    torch_run = train(recipe, backend="torch", progress=False).run_dir
    jax_run = train(recipe, backend="jax").run_dir
    evals = [write_eval(tmp_path / "eval-torch", {"p1": "R..RR"}), write_eval(tmp_path / "eval-jax", {"p1": "RR.RR"})]
    html = write_report([torch_run, jax_run, *evals, GPU_SWEEP], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Same data hash, chat-template hash and loss convention across the runs." in md
    assert "NOT COMPARABLE" not in html.read_text()
    assert re.search(r"\| jax · cpu · tiny-cpu-jax \| 4 \| [\d.]+ \| [\d.]+ \(xla\) \| [\d.]+ \| ", md)
    # torch records its compile (here the first step's warm-up) and checkpoint seconds as jax does
    assert re.search(
        r"\| torch · cpu · tiny-cpu-torch \| 4 \| [\d.]+ \| [\d.]+ \(first-step warm-up\) \| [\d.]+ \| ", md
    )
    assert "the cost with them included is unknown" not in md
    assert "no on-demand price for cpu" in md
    assert (tmp_path / "report" / "charts" / "lengths-tiny-cpu-torch.png").is_file()


@pytest.mark.parametrize("kind", ["eval", "bench"])
def test_a_summary_linked_out_of_the_folder_given_is_refused_by_name(tmp_path, kind):
    """make fuzz, seed 1796582801 (report-16, report-24): the report read an evaluation's or a sweep's summary.json
    through a link out of the folder it was given. The link's target here is a valid summary, so a report that
    followed it would succeed."""
    from crosstune.cli import _register, app

    _register()
    folder = tmp_path / "in" / kind
    if kind == "eval":
        write_eval(folder, {"p1": ".S..R"})
    else:
        folder.mkdir(parents=True)
        shutil.copy(TPU_SWEEP, folder / "summary.json")
    outside = tmp_path / "outside.json"
    (folder / "summary.json").rename(outside)
    (folder / "summary.json").symlink_to(outside)
    result = CliRunner().invoke(app, ["report", str(folder), "--out", str(tmp_path / "out")], terminal_width=400)
    assert result.exit_code == 1, result.output
    assert f"{folder}/summary.json leads out of the folder {folder} (to {outside})" in result.output
    assert "a bug" not in result.output and not (tmp_path / "out").exists()
