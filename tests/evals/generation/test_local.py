"""The local engine batches prompts into one generate() call and gives the same completions as the one-at-a-time
path it replaced, greedy and sampled (each sample drawn from its own seeded generator, whatever its batch-mates)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from crosstune.evals.generation.cache import CompletionCache, SamplingParams
from crosstune.evals.generation.generate import generate_completions
from crosstune.evals.problems.prompt_styles import build_messages
from tests.helpers.evals import PROBLEMS, tiny_local_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@functools.cache
def loaded(folder: Path):
    return transformers.AutoTokenizer.from_pretrained(folder), transformers.AutoModelForCausalLM.from_pretrained(folder)


def one_at_a_time(folder: Path, messages: list[dict], params: SamplingParams, sample: int) -> tuple[str, str]:
    """The local path as it was before batching (crosstune 2026-12-01): one prompt per generate() call, sampling
    from the global RNG seeded with seed + sample."""
    tokenizer, lm = loaded(folder)
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
    with torch.no_grad():
        torch.manual_seed(params.seed + sample)
        output = lm.generate(
            **inputs,
            max_new_tokens=params.max_tokens,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            **(sampling if params.temperature > 0 else {"do_sample": False}),
        )
    new_tokens = output[0, inputs["input_ids"].shape[1] :]
    finish = "length" if len(new_tokens) >= params.max_tokens else "stop"
    return tokenizer.decode(new_tokens, skip_special_tokens=True), finish


def demo_base() -> Path:
    from crosstune.pretrain.base_model import SHIPPED_BASES

    return next(p for p in SHIPPED_BASES.iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("which", ["tiny llama", "demo base"])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(n=1, temperature=0.0, max_tokens=12),
        SamplingParams(n=2, temperature=0.8, top_p=0.95, max_tokens=12),
    ],
)
def test_batched_completions_equal_the_one_at_a_time_path(tmp_path, which, params):
    from crosstune.evals.generation.local import TransformersGenerator

    folder = tiny_local_model(tmp_path / "tiny") if which == "tiny llama" else demo_base()
    style = "codev" if which == "demo base" else "verilogeval"
    engine = TransformersGenerator(folder, batch_size=3)  # 4 problems x n samples: batches of 3 and a remainder
    generation = generate_completions(PROBLEMS, engine, params, CompletionCache(tmp_path / "c.jsonl"), style)
    for problem in PROBLEMS:
        messages = build_messages(problem, style)
        for sample, text in enumerate(generation.completions[problem.name]):
            assert text == one_at_a_time(folder, messages, params, sample)[0], (problem.name, sample)
    batch = [(build_messages(p, style), 0) for p in PROBLEMS]
    finishes = [c.finish_reason for c in engine.complete_batch(batch, params)]
    assert finishes == [one_at_a_time(folder, m, params, 0)[1] for m, _ in batch]
    assert generation.engines == [engine.engine] and engine.engine["batch_size"] == 3


def test_a_template_that_opens_thinking_is_kept_in_the_completion(tmp_path):
    from crosstune.evals.generation.local import TransformersGenerator

    folder = tiny_local_model(tmp_path / "tiny")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = tokenizer.chat_template.replace("assistant {% endif %}", "assistant <think> {% endif %}")
    tokenizer.save_pretrained(folder)
    engine = TransformersGenerator(folder)
    text = engine.complete(build_messages(PROBLEMS[0]), SamplingParams(temperature=0.0, max_tokens=4), 0).text
    assert text.startswith("<think>")  # so extraction can tell an answer from reasoning that never closed
