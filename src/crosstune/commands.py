"""Collects every area's CLI commands onto the root app (one line per area)."""

from __future__ import annotations

import typer


def register_all(app: typer.Typer) -> None:
    from crosstune.compare.cli import register as register_compare
    from crosstune.data.cli import data_app
    from crosstune.demo.cli import register as register_demo
    from crosstune.demo.cli import register_pretrain
    from crosstune.doctor import register as register_doctor
    from crosstune.evals.cli import register as register_eval
    from crosstune.export.cli import register as register_export
    from crosstune.launch.cli import register as register_launch
    from crosstune.models.cli import model_app
    from crosstune.recipe.cli import recipe_app
    from crosstune.serve.cli import register as register_serve
    from crosstune.servebench.cli import bench_app
    from crosstune.study.cli import register as register_study
    from crosstune.train.cli import register as register_train
    from crosstune.train.parity_cli import register as register_parity
    from crosstune.train.plan_cli import register as register_plan

    register_doctor(app)
    register_eval(app)
    register_export(app)
    register_parity(app)
    register_demo(app)
    register_train(app)
    register_plan(app)
    register_compare(app)
    register_serve(app)
    app.add_typer(bench_app, name="bench")
    register_study(app)
    register_launch(app)
    register_pretrain(model_app)  # `crosstune model pretrain`: the demo's base, built where the demo lives
    app.add_typer(data_app, name="data")
    app.add_typer(recipe_app, name="recipe")
    app.add_typer(model_app, name="model")
