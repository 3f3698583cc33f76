"""Synthetic Verilog corpus: parametrised hardware task kinds rendered as CodeV-R1 SFT records and
VerilogEval v2 spec-to-rtl problems, deterministically from a seed."""

from crosstune.synth.corpus import (
    SYNTH_VERSION,
    CorpusSummary,
    OutputNotEmptyError,
    build_design,
    generate_corpus,
    param_key,
)
from crosstune.synth.design import Design, Port, Reset, TaskKind, render_module
from crosstune.synth.prompts import SYSTEM_PROMPT, eval_prompt
from crosstune.synth.tasks import TASK_KIND_BY_NAME, TASK_KINDS
from crosstune.synth.testbench import render_testbench

__all__ = [
    "TASK_KINDS",
    "TASK_KIND_BY_NAME",
    "SYNTH_VERSION",
    "SYSTEM_PROMPT",
    "CorpusSummary",
    "Design",
    "TaskKind",
    "OutputNotEmptyError",
    "Port",
    "Reset",
    "build_design",
    "eval_prompt",
    "generate_corpus",
    "param_key",
    "render_module",
    "render_testbench",
]
