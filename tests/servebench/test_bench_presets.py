"""Named serving grids (servebench.presets): `bench serve --preset seed` sweeps the seed's table shape, and a recipe's
`serve.preset` gives a study's serving stage the same grid on any target."""

from __future__ import annotations

import pytest

from crosstune.recipe.schema import ServeSection
from crosstune.servebench.presets import PRESETS, get_preset
from crosstune.servebench.sweep import BenchError
from crosstune.study.serving import serve_grid
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import cli, one_line_error

SEED_GRID = {"contexts": [1024, 2048, 4096, 8192], "concurrency": [1, 2, 4, 8, 16, 32], "output_len": 256}


def test_the_seed_preset_is_the_seed_table_and_the_31b_recipes_grid():
    from crosstune.recipe import load_recipe
    from tests.helpers.paths import REPO

    seed = get_preset("seed")
    assert {"contexts": list(seed.contexts), "concurrency": list(seed.concurrency), "output_len": seed.output_len} == (
        SEED_GRID
    )
    for name in ("gemma4-31b-tpu-v5p-8.yaml", "gemma4-31b-2xh100.yaml"):  # the seed's recipes sweep it as written
        serve = load_recipe(REPO / "src" / "crosstune" / "recipes" / name).serve
        assert serve_grid(serve) == {**SEED_GRID, "preset": None}
    with pytest.raises(BenchError, match=r"--preset: unknown serving preset 'seeds'; known: seed"):
        get_preset("seeds")
    assert set(PRESETS) == {"seed"}


def test_a_recipes_serve_preset_replaces_its_grid():
    tiny = ServeSection(contexts=[128, 512], concurrency=[1, 4], output_tokens=32, preset="seed")
    assert serve_grid(tiny) == {**SEED_GRID, "preset": "seed"}
    with pytest.raises(BenchError, match=r"the recipe's serve.preset: unknown serving preset 'x'"):
        serve_grid(ServeSection(preset="x"))


def test_bench_serve_preset_sweeps_the_grid(tiny_gemma4_dir):
    base = ["bench", "serve", "--model", "ok", "--tokenizer", str(tiny_gemma4_dir)]
    # the probe checks the grid against the server's max_model_len: the preset's 8,192 + 256 does not fit 4,096
    with FakeOpenAI(served=["ok"], max_model_len=4096) as server:
        line = one_line_error(cli(*base, "--endpoint", server.url, "--preset", "seed"))
    assert "context(s) 4096, 8192 + 256 output tokens exceed the max_model_len 4096" in line
    line = one_line_error(cli(*base, "--endpoint", "http://127.0.0.1:9", "--preset", "seed", "--contexts", "16"))
    assert "--preset seed sets the grid: drop --contexts (or the preset)" in line
