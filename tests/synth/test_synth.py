"""crosstune.synth: determinism, file layout, manifest consistency, train/eval disjointness, CLI behaviour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.synth import TASK_KINDS, OutputNotEmptyError, generate_corpus, param_key
from crosstune.synth.corpus import SYNTH_OUTPUT, plan_eval, plan_train

N_TRAIN, N_EVAL, SEED = 80, 24, 1234
RESPONSE = re.compile(r"\A<think>\n(?P<think>.+?)\n</think>\n<answer>\n(?P<answer>.*)\n</answer>\Z", re.DOTALL)
VERILOG_BLOCK = re.compile(r"```verilog\n(?P<code>.*?)```", re.DOTALL)
EVAL_INTRO = (
    "I would like you to implement a module named TopModule with the following interface. All input and "
    "output ports are one bit unless otherwise specified."
)


def _files(root: Path) -> dict[str, bytes]:
    """The corpus's files, less synth's ownership record (which holds the time it was written)."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != SYNTH_OUTPUT.manifest]
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "corpus"
    generate_corpus(out, N_TRAIN, N_EVAL, SEED)
    return out


@pytest.fixture(scope="module")
def manifest(corpus: Path) -> dict:
    return json.loads((corpus / "manifest.json").read_text())


def test_same_seed_gives_byte_identical_files(corpus: Path, tmp_path: Path) -> None:
    generate_corpus(tmp_path / "again", N_TRAIN, N_EVAL, SEED)
    first, second = _files(corpus), _files(tmp_path / "again")
    assert len(first) == 3 * N_EVAL + 3
    assert first == second
    listed = json.loads((corpus / SYNTH_OUTPUT.manifest).read_text())["files"]
    assert sorted(listed) == sorted(first)  # the ownership record lists every file of the corpus


def test_same_seed_is_identical_across_processes(corpus: Path, tmp_path: Path) -> None:
    # String hashing is salted per process; nothing in the output may depend on it.
    code = (
        "import sys; from pathlib import Path; from crosstune.synth import generate_corpus; "
        f"generate_corpus(Path(sys.argv[1]), {N_TRAIN}, {N_EVAL}, {SEED})"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], check=True, env=env)
    assert _files(tmp_path / "other") == _files(corpus)


def test_different_seed_gives_different_files(corpus: Path, tmp_path: Path) -> None:
    generate_corpus(tmp_path / "other", N_TRAIN, N_EVAL, SEED + 1)
    other = _files(tmp_path / "other")
    assert other["train.jsonl"] != _files(corpus)["train.jsonl"]
    assert other["eval/problems.txt"] != _files(corpus)["eval/problems.txt"]


def test_at_least_twelve_task_kinds_all_present(manifest: dict) -> None:
    assert len(TASK_KINDS) >= 12
    assert set(manifest["families"]) == {f.name for f in TASK_KINDS}
    for name, entry in manifest["families"].items():
        assert entry["train"] >= 1, name
        assert entry["eval"] >= 1, name


def test_manifest_counts_match_files(corpus: Path, manifest: dict) -> None:
    lines = (corpus / "train.jsonl").read_text().splitlines()
    problems = (corpus / "eval" / "problems.txt").read_text().splitlines()
    assert manifest["seed"] == SEED and manifest["version"] >= 1
    assert len(lines) == manifest["n_train"] == len(manifest["train"]) == N_TRAIN
    assert len(problems) == manifest["n_eval"] == len(manifest["eval"]) == N_EVAL
    assert [e["problem"] for e in manifest["eval"]] == problems
    train_counts = Counter(e["family"] for e in manifest["train"])
    eval_counts = Counter(e["family"] for e in manifest["eval"])
    for name, entry in manifest["families"].items():
        assert (entry["train"], entry["eval"]) == (train_counts[name], eval_counts[name])
    # Balanced: counts per task kind differ by at most one.
    assert max(train_counts.values()) - min(train_counts.values()) <= 1
    for name in problems:
        assert re.fullmatch(r"Prob\d{3}_[a-z0-9_]+", name), name
        for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
            assert (corpus / "eval" / f"{name}{suffix}").is_file()
    assert len(list((corpus / "eval").iterdir())) == 3 * N_EVAL + 1


def test_train_records_have_codev_r1_layout(corpus: Path, manifest: dict) -> None:
    records = [json.loads(line) for line in (corpus / "train.jsonl").read_text().splitlines()]
    assert len({r["prompt"] for r in records}) == len(records)
    for record, entry in zip(records, manifest["train"], strict=True):
        assert set(record) == {"system", "prompt", "response"}
        assert all(isinstance(v, str) and v for v in record.values())
        assert "<think>" in record["system"] and "```verilog" in record["system"]
        match = RESPONSE.match(record["response"])
        assert match, record["response"][:200]
        assert len(match["think"].split()) >= 30, match["think"]
        blocks = VERILOG_BLOCK.findall(match["answer"])
        assert len(blocks) == 1
        code = blocks[0]
        assert code.startswith(f"module {entry['module']} (") and code.rstrip().endswith("endmodule")
        assert f"`{entry['module']}`" in record["prompt"] or f"module named {entry['module']}" in record["prompt"]


def test_train_phrasing_varies(corpus: Path) -> None:
    records = [json.loads(line) for line in (corpus / "train.jsonl").read_text().splitlines()]
    first_lines = Counter(r["prompt"].split(" ")[0] for r in records)
    think_openings = Counter(r["response"].split("\n")[1].split(" ")[0] for r in records)
    assert len(first_lines) >= 4 and len(think_openings) >= 3


def test_eval_files_follow_verilogeval_layout(corpus: Path) -> None:
    for name in (corpus / "eval" / "problems.txt").read_text().splitlines():
        prompt = (corpus / "eval" / f"{name}_prompt.txt").read_text()
        assert " ".join(prompt.split()).startswith(EVAL_INTRO)
        assert re.search(r"^ - (input |output) \w+", prompt, re.MULTILINE)
        assert "RefModule" not in prompt
        ref = (corpus / "eval" / f"{name}_ref.sv").read_text()
        assert ref.startswith("module RefModule (") and ref.rstrip().endswith("endmodule")
        test = (corpus / "eval" / f"{name}_test.sv").read_text()
        assert test.startswith("`timescale 1 ps/1 ps")
        for needle in (
            "module stimulus_gen",
            "module tb();",
            "RefModule good1 (",
            "TopModule top_module1 (",
            '$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);',
            "final begin",
            '$display("TIMEOUT");',
            "always @(posedge clk, negedge clk)",
        ):
            assert needle in test, (name, needle)
        assert "$dumpfile" not in test and "$dumpvars" not in test


def test_train_and_eval_parameters_are_disjoint(manifest: dict) -> None:
    eval_keys = {param_key(e["family"], e["params"]) for e in manifest["eval"]}
    train_keys = {param_key(e["family"], e["params"]) for e in manifest["train"]}
    assert len(eval_keys) == N_EVAL  # eval problems are distinct from each other too
    assert not eval_keys & train_keys


def test_disjointness_holds_for_a_large_train_set() -> None:
    # Task kinds with small parameter spaces (decoder, gray code) collide often at this size.
    evals = plan_eval(64, seed=7)
    eval_keys = {param_key(d.task_kind, d.params) for d in evals}
    train = plan_train(3000, seed=7, eval_keys=eval_keys)
    assert not eval_keys & {param_key(t.design.task_kind, t.design.params) for t in train}


def test_an_exhausted_task_kind_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="ran out of fresh parameter sets"):
        plan_eval(40 * len(TASK_KINDS), seed=0)


def test_cli_writes_corpus_and_refuses_non_empty_dir(tmp_path: Path) -> None:
    from crosstune.cli import _register, app

    _register()
    runner = CliRunner()
    args = ["synth", "--out", str(tmp_path / "c"), "--n", "5", "--seed", "3", "--n-eval", "16"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "sequence_detector" in first.output and "total" in first.output
    assert len((tmp_path / "c" / "train.jsonl").read_text().splitlines()) == 5
    second = runner.invoke(app, args)
    assert second.exit_code == 1  # a refusal: the top-level handler's one line (exit 2 is typer's own usage errors)
    assert "holds an earlier output of crosstune synth: pass --force" in " ".join(second.output.split())
    assert "Traceback" not in second.output and isinstance(second.exception, SystemExit)
    (tmp_path / "c" / "eval" / "stale.sv").write_text("a file synth did not write")
    refused = runner.invoke(app, [*args, "--force"])
    assert refused.exit_code == 1 and "eval/stale.sv (not in its .crosstune-synth.json)" in refused.output
    assert (tmp_path / "c" / "eval" / "stale.sv").is_file()  # nothing removed
    (tmp_path / "c" / "eval" / "stale.sv").unlink()
    forced = runner.invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output


def test_force_refuses_a_folder_synth_did_not_write(tmp_path: Path) -> None:
    """A user's folder holding an eval/ and a manifest.json (the names synth writes) is not synth's: --force
    refuses it, naming the files, and deletes nothing."""
    mine = tmp_path / "mine"
    (mine / "eval").mkdir(parents=True)
    (mine / "eval" / "notes.md").write_text("my evaluation notes")
    (mine / "manifest.json").write_text('{"mine": true}')
    with pytest.raises(OutputNotEmptyError, match=r"eval/notes.md, manifest.json \(no .crosstune-synth.json lists"):
        generate_corpus(mine, 5, 4, 0, force=True)
    assert (mine / "eval" / "notes.md").read_text() == "my evaluation notes"
    assert (mine / "manifest.json").read_text() == '{"mine": true}'


def test_reuse_keeps_an_earlier_corpus_of_the_same_arguments_and_redoes_a_changed_one(tmp_path: Path) -> None:
    out = tmp_path / "c"
    first = generate_corpus(out, 8, 4, 1, task_kinds=["mux", "adder"])
    stamp = (out / "train.jsonl").stat().st_mtime_ns
    again = generate_corpus(out, 8, 4, 1, task_kinds=["mux", "adder"], reuse=True)
    assert again.reused and not first.reused and again.counts == first.counts
    assert (out / "train.jsonl").stat().st_mtime_ns == stamp  # untouched: data preparation's fingerprint holds
    with pytest.raises(OutputNotEmptyError, match="pass --force"):  # other arguments: a new corpus, not a reuse
        generate_corpus(out, 9, 4, 1, task_kinds=["mux", "adder"], reuse=True)
    redone = generate_corpus(out, 9, 4, 1, task_kinds=["mux", "adder"], reuse=True, force=True)
    assert not redone.reused and len((out / "train.jsonl").read_text().splitlines()) == 9
    (out / "train.jsonl").write_text("edited\n")  # an edited corpus is not synth's to replace, nor to reuse
    with pytest.raises(OutputNotEmptyError, match=r"train.jsonl \(changed since crosstune synth wrote it\)"):
        generate_corpus(out, 9, 4, 1, task_kinds=["mux", "adder"], reuse=True, force=True)
    assert (out / "train.jsonl").read_text() == "edited\n"
