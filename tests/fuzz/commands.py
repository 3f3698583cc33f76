"""Every command the fuzzer drives, by the name its cases are listed under (`pytest -k`), with its generator."""

from __future__ import annotations

from tests.fuzz import commands_foreign as f
from tests.fuzz import commands_inputs as i
from tests.fuzz import commands_outputs as o

COMMANDS = {
    "recipe-validate": i.recipe_validate,
    "recipe-show": i.recipe_show,
    "data-prepare": i.data_prepare,
    "data-stats": i.data_stats,
    "train": i.train,
    "export": o.export,
    "eval": o.eval_,
    "plan": i.plan,
    "serve-plan": i.serve_plan,
    "bench-serve": o.bench_serve,
    "cost": i.cost,
    "report": o.report,
    "study": o.study,
    "launch": i.launch,
    "model-tiny": i.model_tiny,
    "model-build": i.model_build,
    "recipe-import": f.recipe_import,
    "recipe-export": f.recipe_export,
    "model-config": f.model_config,
    "adapter-config": f.adapter_config,
    "hub-cache": f.hub_cache,
}
