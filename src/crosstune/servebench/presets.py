"""Named serving grids: a sweep's contexts, concurrency levels and output length under one name, so `bench serve
--preset NAME` and a study's serving stage (a recipe's `serve.preset`) measure the same table shape on any target.

`seed`: the grid of the study crosstune reproduces — its serving table (TTFT and throughput per context on TPU v6e-8
and 2×H100) at contexts 1,024–8,192 tokens, 1–32 concurrent requests, 256 output tokens each (the serve grid of
recipes/gemma4-31b-*.yaml; tests/fixtures/bench/ are shaped after the seed's figures on it)."""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.servebench.sweep_config import BenchError


@dataclass(frozen=True)
class Preset:
    name: str
    contexts: tuple[int, ...]
    concurrency: tuple[int, ...]
    output_len: int
    source: str


PRESETS = {
    p.name: p
    for p in (
        Preset(
            "seed",
            (1024, 2048, 4096, 8192),
            (1, 2, 4, 8, 16, 32),
            256,
            "the seed's serving table: TPU v6e-8 vs 2×H100, Gemma 4 31B",
        ),
    )
}


def get_preset(name: str, where: str = "--preset") -> Preset:
    """The named grid, or a BenchError naming `where` and the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise BenchError(f"{where}: unknown serving preset {name!r}; known: {', '.join(PRESETS)}") from None
