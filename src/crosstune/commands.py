"""Collects every area's CLI commands onto the root app: each area's CLI module exposes `register(app)`, called
here in the order `crosstune --help` lists them."""

from __future__ import annotations

import typer


def register_all(app: typer.Typer) -> None:
    from crosstune import doctor
    from crosstune.cost import cli as cost_cli
    from crosstune.data import cli as data_cli
    from crosstune.demo import cli as demo_cli
    from crosstune.evals import cli as evals_cli
    from crosstune.export import cli as export_cli
    from crosstune.launch import cli as launch_cli
    from crosstune.models import cli as models_cli
    from crosstune.parity import cli as parity_cli
    from crosstune.plan import cli as plan_cli
    from crosstune.pretrain import cli as pretrain_cli
    from crosstune.recipe import cli as recipe_cli
    from crosstune.report import cli as report_cli
    from crosstune.serve import cli as serve_cli
    from crosstune.servebench import cli as servebench_cli
    from crosstune.study import cli as study_cli
    from crosstune.synth import cli as synth_cli
    from crosstune.train import cli as train_cli

    areas = [doctor, evals_cli, export_cli, parity_cli, train_cli, plan_cli, cost_cli, report_cli, serve_cli]
    areas += [servebench_cli, study_cli, launch_cli, synth_cli, data_cli, recipe_cli, models_cli, pretrain_cli]
    areas += [demo_cli]
    for area in areas:
        area.register(app)
