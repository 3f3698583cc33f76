"""Test-wide settings: quiet, deterministic, offline, and kind to a shared 2-core machine."""

import functools
import os
from pathlib import Path

import pytest

from tests.helpers.shared import built_once

pytest_plugins = ["tests.helpers.budget"]  # each folder's CPU seconds against tests/budget.toml

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# rich fixes a console's width from COLUMNS when the console is made (at import); pytest-xdist's workers have
# COLUMNS=80 and a shell may export it: without it, output to a pipe is as wide as the CLIs make it, in every run.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

SLOW_TEST_TIMEOUT_S = 900  # multi-process and resume-after-SIGKILL tests; the suite's default is in pyproject.toml


def pytest_collection_modifyitems(items):
    """Tests marked slow get a longer pytest-timeout unless they name their own."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_S))


# --- Shared artefacts, built once per session (tokenizer training + HF init: about a second each) ---------------
# Enough synthetic text for a 1024-token BPE vocabulary; small enough to generate in seconds.
SYNTH_CORPUS = {"n_train": 200, "n_eval": 8, "seed": 0}


@pytest.fixture(scope="session")
def synth_corpus_dir(tmp_path_factory) -> Path:
    """A small synthetic Verilog corpus (train.jsonl + eval/), fixed seed."""
    from crosstune.synth import generate_corpus

    def build(out: Path) -> Path:
        generate_corpus(out, **SYNTH_CORPUS)
        return out

    return built_once(tmp_path_factory, "synth_corpus", build)


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """A tiny random Gemma 3 checkpoint (HF layout, fp32, seed 0) with its tokenizer and chat template."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(build_tiny_model, "gemma3", seed=0, corpus_dir=synth_corpus_dir)
    return built_once(tmp_path_factory, "tiny_gemma3", build)


@pytest.fixture(scope="session")
def tiny_gemma4_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """A tiny random Gemma 4 checkpoint (k_eq_v globals, global head_dim 32, 1 global KV head), seed 0."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(build_tiny_model, "gemma4", seed=0, corpus_dir=synth_corpus_dir)
    return built_once(tmp_path_factory, "tiny_gemma4", build)


@pytest.fixture(scope="session")
def tiny_gemma4_e_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """The E models' layout, tiny (per-layer inputs, the last 3 of 6 layers KV-shared, double-wide MLP), seed 0."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(build_tiny_model, "gemma4", seed=0, corpus_dir=synth_corpus_dir, size="tiny-e")
    return built_once(tmp_path_factory, "tiny_gemma4_e", build)


@pytest.fixture(scope="session")
def tiny_gemma4_e4b_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """tiny-e with the E4B's sharing layers (built as the owning ones: no double-wide MLP), seed 0."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(build_tiny_model, "gemma4", seed=0, corpus_dir=synth_corpus_dir, size="tiny-e4b")
    return built_once(tmp_path_factory, "tiny_gemma4_e4b", build)


@pytest.fixture(scope="session")
def tiny_gemma4_moe_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """The 26B-A4B's layout, tiny (8 experts, top 2, beside the dense MLP; k_eq_v globals), seed 0."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(build_tiny_model, "gemma4", seed=0, corpus_dir=synth_corpus_dir, size="tiny-moe")
    return built_once(tmp_path_factory, "tiny_gemma4_moe", build)


@pytest.fixture(scope="session")
def tiny_gemma4_unified_dir(tmp_path_factory, synth_corpus_dir) -> Path:
    """The 12B's architecture (transformers' gemma4_unified), tiny, in the hub's layout (Gemma4UnifiedForConditional-
    Generation: the decoder under model.language_model., a small vision embedder beside it), fp32, seed 0."""
    from crosstune.models.tiny import build_tiny_model

    build = functools.partial(
        build_tiny_model, "gemma4", seed=0, corpus_dir=synth_corpus_dir, size="tiny-unified", layout="multimodal"
    )
    return built_once(tmp_path_factory, "tiny_gemma4_unified", build)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty hub cache for this test (HF_HUB_CACHE): huggingface_hub looks there in this process (its constant,
    read at each call) and in child processes (the variable); fill it with tests.helpers.hub_cache."""
    from huggingface_hub import constants

    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache
