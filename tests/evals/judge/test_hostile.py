"""The hostile corpus (tests/fixtures/hostile): no pass, no write outside the sandbox, no leak, bounded time.

Each fixture is a completion for Prob002_and2 whose honest part is wrong or irrelevant, so only the attack
could make it pass. `// expect:` lists the strict categories it may get. @CANARY@ and @SECRET@ are replaced
by a canary folder (must stay empty) and a file holding a random secret (must appear in no output).
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from pathlib import Path

import pytest

from crosstune.evals.evaluate import evaluate_completions
from crosstune.evals.judge.landlock import abi_version
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.paths import FIXTURES

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")

HOSTILE = sorted((FIXTURES / "hostile").glob("*.sv"))
CHECKOUT = FIXTURES / "verilogeval"
TIMEOUT_S = 4.0
FOOLS_UPSTREAM = {"fake_mismatches_display.sv", "fake_mismatches_write.sv"}


def expected_codes(path: Path) -> set[str]:
    match = re.search(r"^// expect: (.+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} lacks an `// expect:` line"
    return set(match.group(1).split())


def test_corpus_covers_the_known_attacks():
    names = {p.stem for p in HOSTILE}
    for needed in [
        "finish_early",
        "fatal_early",
        "fake_mismatches_display",
        "hier_errors_write",
        "hier_root",
        "hier_escaped",
        "finish_define",
        "file_write_abs",
        "file_write_rel",
        "writememh_abs",
        "dumpfile_abs",
        "readmemh_secret",
        "fgets_secret",
        "include_secret",
        "display_flood",
        "always_no_delay",
        "while_one",
        "memory_hog",
    ]:
        assert needed in names
    assert all("." not in expected_codes(p) for p in HOSTILE)


@pytest.mark.parametrize(
    "use_landlock",
    [
        pytest.param(True, id="landlock", marks=pytest.mark.skipif(abi_version() < 1, reason="no Landlock")),
        pytest.param(False, id="rejection-and-rlimits-only"),
    ],
)
def test_hostile_completions_get_no_pass_and_stay_contained(tmp_path, capfd, use_landlock):
    canary, work, out = tmp_path / "canary", tmp_path / "work", tmp_path / "out"
    canary.mkdir()
    work.mkdir()
    secret = f"SECRET-{secrets.token_hex(12)}"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret + "\n")
    texts = [p.read_text().replace("@CANARY@", str(canary)).replace("@SECRET@", str(secret_file)) for p in HOSTILE]
    completions = {"Prob002_and2": [f"```verilog\n{text}```\n" for text in texts]}
    problems = load_problems(CHECKOUT, patterns=["Prob002_and2"])
    limits = Limits(timeout_s=TIMEOUT_S, memory_mib=512, landlock=use_landlock)

    start = time.monotonic()
    report = evaluate_completions(problems, completions, out, workers=2, limits=limits, workroot=work)
    elapsed = time.monotonic() - start

    for path, record in zip(HOSTILE, report.records, strict=True):
        assert record["strict"] in expected_codes(path), (path.name, record["strict"], record["detail"])
        assert record["wall_s"] < TIMEOUT_S + 1.0, (path.name, record["wall_s"])
        if path.name in FOOLS_UPSTREAM:
            assert record["upstream"] == "."  # upstream's rule is fooled by a printed line; strict is not
        else:
            assert record["upstream"] != "."
    assert report.summary["pass_at_k"]["1"] == 0.0
    assert elapsed < len(HOSTILE) * (TIMEOUT_S + 1.0) / 2 + 10

    assert list(canary.iterdir()) == [] and list(work.iterdir()) == []  # nothing written, sample dirs removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary", "out", "secret.txt", "work"]
    captured = capfd.readouterr()
    outputs = [captured.out, captured.err] + [p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()]
    passwd_line = Path("/etc/passwd").read_text().splitlines()[0] if Path("/etc/passwd").exists() else secret
    for text in outputs:
        assert secret not in text and passwd_line not in text
