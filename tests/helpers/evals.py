"""What the eval tests share: `crosstune eval` run in-process, the VerilogEval fixture's problems, the fake server
(tests/helpers/fake_openai.py) as the eval client meets it and an answer that names its request, and a tiny local
model for the transformers engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crosstune.cli import _ExpectedFailures
from crosstune.evals.cli import register
from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import FIXTURES

CHECKOUT = FIXTURES / "verilogeval"
PROBLEMS = load_problems(CHECKOUT)  # 4 problems
runner = CliRunner()


def make_app() -> typer.Typer:
    """`eval` under crosstune's own top-level handler (an expected failure: one line, its exit status)."""
    app = typer.Typer(cls=_ExpectedFailures)

    @app.callback()
    def root() -> None:
        """crosstune (test root)."""

    register(app)
    return app


def run(*args: str):
    """`crosstune eval ARGS` in-process; an exception is raised, not turned into an exit code."""
    return runner.invoke(make_app(), ["eval", *args], catch_exceptions=False)


def eval_server(mode_by_seed: Callable[[int], str] = lambda seed: "ok", served=("m",), **options) -> FakeOpenAI:
    """The fake server as the eval client's failure tests meet it: it serves `served`, each request meets the mode its
    seed names (sample index + base seed), and what stalls stalls 30 s (minutes for the client) unless released."""
    return FakeOpenAI(mode=lambda body: mode_by_seed(body["seed"]), served=served, stall_s=30.0, **options)


def echo_answer(body: dict) -> str:
    """A fake server's answer naming the request it answers (its seed and question length); it holds no module."""
    question = body["messages"][-1]["content"]
    return f"[BEGIN]\n// seed {body['seed']} for {len(question)} chars\n[DONE]"


def tiny_local_model(folder: Path) -> Path:
    """A 1-layer Llama with a word-level tokenizer and a chat template, built offline."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<eos>", "<unk>", "system", "user", "assistant", "module", "TopModule", "endmodule", "assign"]
    words += [f"w{i}" for i in range(54)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}"
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", chat_template=template
    )
    config = transformers.LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=1,
    )
    transformers.set_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
