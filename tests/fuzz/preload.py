"""What the fuzzer's forkserver imports once (tests/fuzz/harness.py): crosstune's CLI with every command registered
and the libraries the commands import lazily, except torch and jax (a forked child of a process that initialised
them is not safe, and their import is a small part of the few cases that reach them)."""

import importlib

from crosstune.cli import _register

_register()
for _name in (
    "crosstune.recipe",
    "crosstune.data.prepare",
    "crosstune.export",
    "crosstune.evals",
    "crosstune.servebench.sweep",
    "crosstune.study.runner",
    "crosstune.planner",
    "crosstune.models.tiny",
    "transformers",
):
    importlib.import_module(_name)
