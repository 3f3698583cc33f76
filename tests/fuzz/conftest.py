"""The fuzzer's session: its world (valid inputs, built once), the command runner (a forkserver by default) and the
fake endpoint every eval and bench case talks to (tests/helpers/fake_openai.py)."""

from __future__ import annotations

import functools
import os

import pytest

from tests.fuzz.commands_outputs import MODEL
from tests.fuzz.harness import Runner
from tests.fuzz.world import build_world
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.shared import built_once


@pytest.fixture(scope="session")
def world(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir):
    build = functools.partial(build_world, model_dir=tiny_gemma4_dir, corpus_dir=synth_corpus_dir)
    return built_once(tmp_path_factory, "fuzz_world", build)


@pytest.fixture(scope="session")
def runner() -> Runner:
    return Runner(os.environ.get("FUZZ_START", "fork"))


@pytest.fixture(scope="session")
def endpoint():
    with FakeOpenAI(served=[MODEL], max_model_len=4096) as server:
        yield server
