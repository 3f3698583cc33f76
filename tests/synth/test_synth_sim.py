"""crosstune.synth under Icarus Verilog: references pass their own testbenches, wrong designs do not."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

from crosstune.synth import TASK_KINDS, Design, build_design, generate_corpus, render_module, render_testbench
from tests.helpers.verilog import HAVE_IVERILOG, SimResult, simulate

pytestmark = pytest.mark.skipif(not HAVE_IVERILOG, reason="needs iverilog and vvp on PATH")
T = TypeVar("T")
R = TypeVar("R")
EXTRA_PER_KIND = 8  # parameter sets per task kind beyond the eval set, for references and mutants


def _pmap(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    with ThreadPoolExecutor(max_workers=2) as pool:  # the test machine has 2 shared cores
        return list(pool.map(fn, items))


def _as_top(module_text: str) -> str:
    return re.sub(r"\Amodule \w+ \(", "module TopModule (", module_text, count=1)


def _run(design: Design, top: str) -> SimResult:
    return simulate({"top.sv": top, "test.sv": render_testbench(design), "ref.sv": render_module(design, "RefModule")})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth-sim") / "corpus"
    generate_corpus(out, n_train=len(TASK_KINDS), n_eval=24, seed=99)
    return out


@pytest.fixture(scope="module")
def extra_designs() -> list[Design]:
    designs = []
    for kind in TASK_KINDS:
        rng = random.Random(f"sim-test:{kind.name}")
        designs += [kind.build(kind.sample(rng), rng) for _ in range(EXTRA_PER_KIND)]
    return designs


def test_every_eval_reference_passes_its_own_testbench(corpus: Path) -> None:
    eval_dir = corpus / "eval"
    names = (eval_dir / "problems.txt").read_text().splitlines()
    kinds = {e["family"] for e in json.loads((corpus / "manifest.json").read_text())["eval"]}
    assert kinds == {k.name for k in TASK_KINDS}

    def run(name: str) -> SimResult:
        ref = (eval_dir / f"{name}_ref.sv").read_text()
        test = (eval_dir / f"{name}_test.sv").read_text()
        return simulate({"top.sv": _as_top(ref), "test.sv": test, "ref.sv": ref})

    for name, result in zip(names, _pmap(run, names), strict=True):
        assert result.compiled and result.compile_log == "", (name, result.compile_log)
        assert result.passed, (name, result.sim_log[-1500:])
        assert result.samples > 20, name
        assert "TIMEOUT" not in result.sim_log, name


def test_references_pass_and_mutants_fail_for_every_task_kind(extra_designs: list[Design]) -> None:
    def run(design: Design) -> tuple[SimResult, SimResult]:
        good = _run(design, render_module(design, "TopModule"))
        bad = _run(design, render_module(design, "TopModule", design.mutant_body))
        return good, bad

    for design, (good, bad) in zip(extra_designs, _pmap(run, extra_designs), strict=True):
        assert design.mutant_body != design.body
        assert good.passed and good.compile_log == "", (design.slug, good.compile_log, good.sim_log[-1000:])
        assert bad.compiled, (design.slug, bad.compile_log)
        assert bad.mismatches and bad.mismatches > 0, (design.slug, "mutant passed", design.mutant_body)


def _flip_output(design: Design, output: str) -> str:
    """A TopModule that wraps the reference and inverts bit 0 of one output."""
    inner = render_module(design, "Inner")
    conns = ", ".join(
        f".{p.name}({p.name}_raw)" if p.direction == "output" else f".{p.name}({p.name})" for p in design.ports
    )
    body = "\n".join(f"    wire [{p.width - 1}:0] {p.name}_raw;" for p in design.outputs)
    body += f"\n\n    Inner u_inner ({conns});\n\n"
    body += "\n".join(
        f"    assign {p.name} = {p.name}_raw" + (" ^ 1'b1;" if p.name == output else ";") for p in design.outputs
    )
    plain = replace(design, ports=tuple(replace(p, is_reg=False) for p in design.ports))
    return render_module(plain, "TopModule", body) + "\n" + inner


def test_every_output_is_checked(corpus: Path) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    cases = []
    for entry in manifest["eval"]:
        design = build_design(entry["family"], entry["params"])
        cases += [(design, p.name) for p in design.outputs]

    def run(case: tuple[Design, str]) -> SimResult:
        design, output = case
        return _run(design, _flip_output(design, output))

    for (design, output), result in zip(cases, _pmap(run, cases), strict=True):
        assert result.compiled, (design.slug, result.compile_log)
        assert result.mismatches and result.mismatches > 0, (design.slug, output)
        hint = re.search(rf"Output '{output}' has (\d+) mismatches", result.sim_log)
        assert hint and int(hint[1]) > 0, (design.slug, output)  # the per-output counter sees it too


def test_training_answers_pass_the_matching_testbench(corpus: Path) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    records = [json.loads(line) for line in (corpus / "train.jsonl").read_text().splitlines()]
    first_per_kind: dict[str, tuple[dict, dict]] = {}
    for entry, record in zip(manifest["train"], records, strict=True):
        first_per_kind.setdefault(entry["family"], (entry, record))
    assert set(first_per_kind) == {f.name for f in TASK_KINDS}

    def run(pair: tuple[dict, dict]) -> SimResult:
        entry, record = pair
        code = re.findall(r"```verilog\n(.*?)```", record["response"], re.DOTALL)[-1]
        return _run(build_design(entry["family"], entry["params"], style_seed=1), _as_top(code))

    pairs = list(first_per_kind.values())
    for (entry, _), result in zip(pairs, _pmap(run, pairs), strict=True):
        assert result.compile_log == "", (entry["module"], result.compile_log)
        assert result.passed, (entry["module"], result.sim_log[-1000:])
