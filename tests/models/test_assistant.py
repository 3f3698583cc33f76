"""MTP drafters in transformers' gemma4_assistant layout: built for a base (its heads, head sizes, KV heads and
vocabulary), loaded back by transformers, lossless in transformers' own assisted generation, and fitted the way vLLM
runs them (the fit's batched form equals the assistant's own forward at one position)."""

from __future__ import annotations

import json

import pytest

from crosstune.errors import InputError
from crosstune.models.assistant import build_assistant, check_pair, save_assistant
from crosstune.models.drafter_fit import base_states, draft_logits, fit_drafter


@pytest.fixture(scope="module")
def base(tiny_gemma4_dir):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(tiny_gemma4_dir, dtype="float32").eval()


def test_drafter_layout_reads_the_base_kv(tmp_path, tiny_gemma4_dir, tiny_gemma3_dir):
    import transformers

    drafter = build_assistant(tiny_gemma4_dir, tmp_path)
    save_assistant(drafter, tiny_gemma4_dir, tmp_path / "d")
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    base = json.loads((tiny_gemma4_dir / "config.json").read_text())
    text = cfg["text_config"]
    assert cfg["model_type"] == "gemma4_assistant" and cfg["architectures"] == ["Gemma4AssistantForCausalLM"]
    assert cfg["backbone_hidden_size"] == base["hidden_size"] and text["hidden_size"] == base["hidden_size"] // 2
    assert text["num_kv_shared_layers"] == text["num_hidden_layers"] == 4  # every layer reads the base's K/V
    assert text["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"]
    for key in ("vocab_size", "head_dim", "global_head_dim", "num_key_value_heads", "num_global_key_value_heads"):
        assert text[key] == base[key], key
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "d")
    assert type(loaded).__name__ == "Gemma4AssistantForCausalLM"
    assert check_pair(tiny_gemma4_dir, tmp_path / "d") == []
    with pytest.raises(InputError, match="an MTP drafter is built for a Gemma 4 base"):
        build_assistant(tiny_gemma3_dir, tmp_path)
    assert "not a Gemma 4 MTP drafter" in check_pair(tiny_gemma4_dir, tiny_gemma4_dir)[0]


def test_a_base_value_the_drafter_carries_is_typed_before_any_work(tmp_path, tiny_gemma4_dir):
    """A base config.json whose sliding_window is null (the fuzzer's case): refused naming the file and the field,
    before the output is touched."""
    import shutil

    base = tmp_path / "base"
    shutil.copytree(tiny_gemma4_dir, base)
    cfg = json.loads((base / "config.json").read_text())
    cfg["sliding_window"] = None
    (base / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"base/config\.json: Validation error for field 'sliding_window': TypeError"):
        build_assistant(base, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_fit_form_equals_the_assistant_forward_and_generation_is_lossless(base, tiny_gemma4_dir, tmp_path):
    import torch

    drafter = build_assistant(tiny_gemma4_dir, tmp_path, seed=1)
    report = fit_drafter(base, drafter, steps=6, sequences=8, new_tokens=16, seed=3)
    assert report.last_loss < report.first_loss and len(report.accuracy) == len(report.held_out) == 2
    ids = torch.randint(8, base.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    hidden, embeds, kv = base_states(base, ids)
    cut = {k: (v[0][:, :, :-1], v[1][:, :, :-1]) for k, v in kv.items()}
    with torch.no_grad():
        batched = draft_logits(drafter, embeds[:, 1:], hidden[:, :-1], cut, 1)[0]
        for t in (0, 9, 18):  # position t: token t+1 and the base's state at t, the base's K/V of positions <= t
            own = drafter(
                inputs_embeds=torch.cat([embeds[:, t + 1 : t + 2], hidden[:, t : t + 1]], -1),
                position_ids=torch.tensor([[t]]),
                shared_kv_states={k: (v[0][:, :, : t + 1], v[1][:, :, : t + 1]) for k, v in kv.items()},
            ).logits[0, 0]
            assert torch.allclose(own, batched[0, t], atol=1e-4), t
    prompt = ids[:, :12]
    kw = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False}
    plain = base.generate(prompt, **kw)
    assisted = base.generate(prompt, assistant_model=drafter, **kw)
    assert torch.equal(plain, assisted)  # greedy speculative decoding changes no token


def test_cli_builds_a_fitted_drafter_and_refuses_other_families(tmp_path, tiny_gemma4_dir, tiny_gemma3_dir):
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    out = tmp_path / "drafter"
    args = ["model", "tiny", "--family", "gemma4", "--assistant", str(tiny_gemma4_dir), "--out", str(out)]
    ok = CliRunner().invoke(app, [*args, "--fit-steps", "2"])
    assert ok.exit_code == 0, ok.output
    manifest = json.loads((out / ".crosstune-model.json").read_text())
    assert manifest["settings"]["fit_steps"] == 2 and manifest["fit"]["steps"] == 2
    assert "fit: 2 steps on 256 greedy continuations" in " ".join(ok.output.split())
    assert CliRunner().invoke(app, args).exit_code != 0  # an earlier build is replaced only with --force
    bad = CliRunner().invoke(app, [*args[:5], str(tiny_gemma3_dir), "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "built for a Gemma 4 base" in " ".join(bad.output.split())
    g3 = CliRunner().invoke(
        app, ["model", "tiny", "--family", "gemma3", "--assistant", str(tiny_gemma4_dir), "--out", str(tmp_path / "y")]
    )
    assert g3.exit_code != 0 and "Gemma 4 only" in " ".join(g3.output.split())
