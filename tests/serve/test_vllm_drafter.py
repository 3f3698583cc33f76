"""Real vLLM (the CPU build) with an MTP drafter: a tiny drafter fitted to the tiny base's greedy outputs drafts for
the base and for a fine-tune of it (the merged export of a LoRA adapter); the engine's acceptance counters are read
per cell by the bench, greedy outputs are unchanged by drafting, and the drafter drafts far above chance on both.
Three vLLM starts (base, base + drafter, fine-tune + drafter): ~4-6 min on 2 cores. Figures: docs/BENCHMARKS.md,
"Speculative decoding"."""

from __future__ import annotations

import asyncio
import json

import pytest

from crosstune.export import export_run
from crosstune.models.assistant import build_assistant, save_assistant
from crosstune.serve.drafter import Drafter
from crosstune.serve.engine import vllm_binary
from crosstune.serve.process import start_server, stop_server
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.export import torch_run
from tests.helpers.ports import free_port

pytestmark = [
    pytest.mark.serve,
    pytest.mark.slow,
    pytest.mark.skipif(vllm_binary() is None, reason="the serving environment .venv-serve is absent: `make serve-env`"),
]
DRAFT_TOKENS = 2
FIT_STEPS = 150
CONCURRENCY = [1, 4]
PROMPT = [11, 57, 300, 412, 9, 77, 150, 868, 23, 640, 301, 99]


def greedy(base_url: str, model: str, n: int = 24) -> list[int]:
    import httpx

    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": n,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    r = httpx.post(base_url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def measure(tmp_path, model_dir, name: str, tokenizer, drafter: Drafter | None) -> tuple[dict, list[int]]:
    state_dir = tmp_path / f"server-{name}"
    state = start_server(model_dir, state_dir, name=name, port=free_port(), drafter=drafter)
    try:
        tokens = greedy(state.base_url, name)
        cfg = SweepConfig(
            endpoint=state.base_url,
            model=name,
            tokenizer=tokenizer,
            contexts=[64],
            concurrency=CONCURRENCY,
            output_len=64,
            num_requests=8,
            warmup=1,
            label=name,
            target="cpu",
            server_drafter=state.drafter,
        )
        summary = asyncio.run(run_sweep(cfg, tmp_path / f"bench-{name}"))
    finally:
        stop_server(state_dir)
    for c in summary["cells"]:  # the figures, also when a later assertion fails
        print(name, c["concurrency"], round(c["output_throughput"], 1), json.dumps(c["speculation"]), flush=True)
    return summary, tokens


def test_acceptance_on_base_and_fine_tune(tmp_path, tiny_gemma4_dir):
    import torch
    import transformers

    from crosstune.models.drafter_fit import fit_drafter

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_gemma4_dir, dtype="float32").eval()
    drafter = build_assistant(tiny_gemma4_dir, tmp_path)
    fit = fit_drafter(base, drafter, steps=FIT_STEPS)
    save_assistant(drafter, tiny_gemma4_dir, tmp_path / "drafter")
    want = base.generate(torch.tensor([PROMPT]), max_new_tokens=24, min_new_tokens=24, do_sample=False)[0, 12:]
    run = torch_run(tmp_path / "run", tiny_gemma4_dir, "gemma4", rank=8, alpha=32.0)
    export_run(run, "merged", tmp_path / "tuned")  # "merged" alone: the folder itself
    tuned = tmp_path / "tuned"
    d = Drafter(str(tmp_path / "drafter"), DRAFT_TOKENS, "fitted here")

    plain, plain_tokens = measure(tmp_path, tiny_gemma4_dir, "base", tiny_gemma4_dir, None)
    on_base, base_tokens = measure(tmp_path, tiny_gemma4_dir, "base-mtp", tiny_gemma4_dir, d)
    on_tuned, tuned_tokens = measure(tmp_path, tuned, "tuned-mtp", tiny_gemma4_dir, d)

    assert plain_tokens == base_tokens == want.tolist()  # drafting changes no greedy token
    assert tuned_tokens != base_tokens  # the fine-tune's outputs moved
    assert all(c["speculation"] is None for c in plain["cells"])
    rows = []
    for label, summary in (("base", on_base), ("fine-tune", on_tuned)):
        for cell, ref in zip(summary["cells"], plain["cells"], strict=True):
            s = cell["speculation"]
            assert cell["failed"] == 0 and s["proposed_tokens"] > 0 and s["drafter"] == d.model
            assert s["proposed_tokens"] == pytest.approx(DRAFT_TOKENS * s["drafts"])
            rows.append(
                (
                    label,
                    cell["concurrency"],
                    s["acceptance_rate"],
                    s["mean_accepted_length"],
                    cell["output_throughput"] / ref["output_throughput"],
                )
            )
    print(json.dumps({"fit": fit.__dict__, "rows": rows}))
    # vLLM runs the drafter as it was fitted (the same inputs, positions and K/V): it drafts the base's tokens far
    # above chance (1 in 1,024). Measured 5.3 / 8.1 % on the base, 6.8 / 8.4 % on the fine-tune (concurrency 1 / 4):
    # no drop, within ~1 standard error — what this drafter learned (mostly "the last token repeats", 21 % of the
    # base's greedy tokens) the fine-tune's outputs share (docs/BENCHMARKS.md, "Speculative decoding").
    assert min(r[2] for r in rows) > 0.02
