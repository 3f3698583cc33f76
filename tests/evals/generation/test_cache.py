"""The completion cache knows which model answered: new weights at the same path, or behind the same served name,
are asked again (the key holds the model's fingerprint, not its path or name), and a rerun says how many samples
came from the cache."""

from __future__ import annotations

import shutil

import pytest

from crosstune.evals.generation.cache import CompletionCache, SamplingParams
from crosstune.evals.generation.endpoint import EndpointGenerator
from crosstune.evals.generation.generate import generate_completions
from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.evals import eval_server

GREEDY = SamplingParams(n=1, temperature=0.0, max_tokens=4)


@pytest.fixture
def problems(synth_corpus_dir):
    return load_problems(synth_corpus_dir / "eval")[:2]


def test_new_weights_at_the_same_path_are_asked_again(tmp_path, tiny_gemma4_dir, problems):
    pytest.importorskip("torch")
    from safetensors.numpy import load_file, save_file

    from crosstune.evals.generation.local import TransformersGenerator

    model, path = tmp_path / "model", tmp_path / "completions.jsonl"
    shutil.copytree(tiny_gemma4_dir, model)
    first = generate_completions(problems, TransformersGenerator(model), GREEDY, CompletionCache(path))
    again = generate_completions(problems, TransformersGenerator(model), GREEDY, CompletionCache(path))
    weights = load_file(str(model / "model.safetensors"))
    weights = {name: value * 1.5 for name, value in weights.items()}
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    changed = generate_completions(problems, TransformersGenerator(model), GREEDY, CompletionCache(path))
    assert len(CompletionCache(path)) == 4  # the new weights' two samples beside the old ones
    assert (first.from_cache, again.from_cache, changed.from_cache) == (0, 2, 0)


def test_a_served_model_is_known_by_its_files_and_the_revision_the_caller_states(tmp_path, problems):
    served = tmp_path / "merged"  # the folder vLLM serves (its /v1/models `root`), on this machine
    served.mkdir()
    (served / "config.json").write_text("{}")
    (served / "model.safetensors").write_bytes(b"\0" * 64)
    path = tmp_path / "completions.jsonl"
    with eval_server(root=str(served)) as server:

        def ask(revision: str | None = None) -> int:
            engine = EndpointGenerator(server.url, "m", retries=0)
            return generate_completions(problems, engine, GREEDY, CompletionCache(path), revision=revision).from_cache

        assert (ask(), ask()) == (0, 2) and len(server.seeds) == 2
        (served / "model.safetensors").write_bytes(b"\1" * 64)  # re-exported in place: same path, same name
        assert ask() == 0 and len(server.seeds) == 4
        assert ask("export sha256 abc") == 0 and ask("export sha256 abc") == 2 and len(server.seeds) == 6
    with eval_server(root="/not/on/this/machine") as server:
        engine = EndpointGenerator(server.url, "m", retries=0)
        generate_completions(problems, engine, GREEDY, CompletionCache(tmp_path / "remote.jsonl"))
        assert engine.identity == {"served": "m", "root": "/not/on/this/machine", "weights": None}
