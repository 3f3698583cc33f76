"""Tiny Gemma checkpoints: HF loading, per-layer structure, parameter counts, tokenizer, determinism, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from crosstune.families import get_family
from crosstune.models.tiny import build_tiny_model
from crosstune.models.tokenizer import special_tokens, train_tokenizer

VERILOG = (
    "module counter #(parameter W = 8) (\n"
    "  input  wire         clk, rst_n,\n"
    "  output reg [W-1:0]  q\n"
    ");\n"
    "  always @(posedge clk or negedge rst_n)\n"
    "    if (!rst_n) q <= {W{1'b0}};\n"
    "    else        q <= q + 1'b1;  // wraps\n"
    "endmodule\n"
)
UTF8 = "// Zähler für µC — ✓ 計数器\n\tassign y = a ~^ b;\r\n"

EXPECTED_SPECIAL_IDS = {
    "gemma3": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 4, "<end_of_turn>": 5},
    "gemma4": {
        "<pad>": 0,
        "<eos>": 1,
        "<bos>": 2,
        "<unk>": 3,
        "<|turn>": 4,
        "<turn|>": 5,
        "<|channel>": 6,
        "<channel|>": 7,
        "<|think|>": 8,
    },
}


@pytest.fixture(params=["gemma3", "gemma4"])
def family_dir(request, tiny_gemma3_dir, tiny_gemma4_dir):
    return request.param, {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[request.param]


# --- model ---------------------------------------------------------------------------------------------------------
def test_loads_offline_and_gives_finite_logits(family_dir):
    name, path = family_dir
    spec = get_family(name).spec("tiny")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert type(model).__name__ == get_family(name).hf_causal_lm_class
    assert model.dtype == torch.float32
    batch = tok(["module a; endmodule", VERILOG], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], spec.vocab_size)
    assert torch.isfinite(logits).all()
    assert logits.std() > 0


def test_structure_matches_spec(family_dir):
    name, path = family_dir
    fam = get_family(name)
    spec = fam.spec("tiny")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == spec.total_params
    assert [layer.self_attn.is_sliding for layer in model.model.layers] == [True] * 5 + [False]
    for i, layer in enumerate(model.model.layers):
        attn, shapes = layer.self_attn, spec.projection_shapes(i)
        for t in ("q", "k", "o"):
            assert tuple(getattr(attn, f"{t}_proj").weight.shape) == shapes[t], (i, t)
        if "v" in shapes:
            assert tuple(attn.v_proj.weight.shape) == shapes["v"]
        else:
            assert getattr(attn, "v_proj", None) is None
    config = json.loads((path / "config.json").read_text())
    assert fam.spec_from_hf_config(config, name=spec.name) == spec


def test_gemma4_layer_peculiarities(tiny_gemma4_dir):
    """Written out by hand: sliding layers head_dim 32 with 2 KV heads and v_proj; the global layer head_dim 64,
    1 KV head, keys reused as values (no v_proj). 32 and 64 are head sizes vLLM's CPU attention accepts."""
    model = AutoModelForCausalLM.from_pretrained(tiny_gemma4_dir)
    sliding, glob = model.model.layers[0].self_attn, model.model.layers[5].self_attn
    assert (sliding.head_dim, sliding.sliding_window) == (32, 32)
    assert sliding.q_proj.weight.shape == (4 * 32, 64)
    assert sliding.k_proj.weight.shape == sliding.v_proj.weight.shape == (2 * 32, 64)
    assert (glob.head_dim, glob.sliding_window, glob.v_proj) == (64, None, None)
    assert glob.q_proj.weight.shape == (4 * 64, 64)
    assert glob.k_proj.weight.shape == (1 * 64, 64)
    assert glob.o_proj.weight.shape == (64, 4 * 64)
    assert model.config.final_logit_softcapping == 30.0
    keys = json.loads((tiny_gemma4_dir / "config.json").read_text())
    assert keys["num_global_key_value_heads"] == 1 and keys["attention_k_eq_v"] is True


def test_gemma3_layers_share_one_layout(tiny_gemma3_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_gemma3_dir)
    for layer in model.model.layers:
        attn = layer.self_attn
        assert attn.head_dim == 32
        assert attn.q_proj.weight.shape == (128, 64)
        assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (64, 64)
    assert model.config.query_pre_attn_scalar == 32


def test_files_and_generation_config(family_dir):
    name, path = family_dir
    files = {p.name for p in path.iterdir()}
    assert files == {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    turn_end = EXPECTED_SPECIAL_IDS[name][get_family(name).chat.turn_end]
    gen = json.loads((path / "generation_config.json").read_text())
    assert (gen["eos_token_id"], gen["bos_token_id"], gen["pad_token_id"]) == ([1, turn_end], 2, 0)
    tok_config = json.loads((path / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "chat_template" in tok_config
    from safetensors import safe_open

    with safe_open(path / "model.safetensors", "pt") as f:
        keys = list(f.keys())
        assert all(f.get_slice(k).get_dtype() == "F32" for k in keys)
    assert "model.layers.5.self_attn.q_proj.weight" in keys  # text-only layout, also for Gemma 4
    assert not any(k.startswith("lm_head") for k in keys)  # tied embeddings


# --- tokenizer -----------------------------------------------------------------------------------------------------
def test_tokenizer_special_tokens_and_size(family_dir):
    name, path = family_dir
    tok = AutoTokenizer.from_pretrained(path)
    assert len(tok) == tok.backend_tokenizer.get_vocab_size() == 1024 == get_family(name).spec("tiny").vocab_size
    assert special_tokens(name) == list(EXPECTED_SPECIAL_IDS[name])
    for token, token_id in EXPECTED_SPECIAL_IDS[name].items():
        assert tok.convert_tokens_to_ids(token) == token_id
        assert tok(token, add_special_tokens=False)["input_ids"] == [token_id]
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    control = "".join(EXPECTED_SPECIAL_IDS[name])
    assert tok(control, add_special_tokens=False)["input_ids"] == list(EXPECTED_SPECIAL_IDS[name].values())


@pytest.mark.parametrize("text", [VERILOG, UTF8, " leading and trailing  ", ""])
def test_tokenizer_round_trip(family_dir, text):
    _, path = family_dir
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    with_bos = tok(text)["input_ids"]
    assert with_bos == [tok.bos_token_id, *ids]
    assert tok.decode(with_bos, skip_special_tokens=True) == text
    assert tok.unk_token_id not in ids


def test_tokenizer_learned_verilog_merges(tiny_gemma4_dir):
    tok = AutoTokenizer.from_pretrained(tiny_gemma4_dir)
    n = len(tok(VERILOG, add_special_tokens=False)["input_ids"])
    assert n < len(VERILOG.encode()) / 1.5  # merges learned from the corpus compress Verilog well below bytes


def test_tokenizer_spells_numbers_digit_by_digit(family_dir):
    # As Gemma's tokenizers do: a width reads the same in a prompt's "(20 bits)" and in the code's "[19:0]".
    tok = AutoTokenizer.from_pretrained(family_dir[1])
    pieces = tok.tokenize("input [19:0] a, (20 bits) 1024")
    digits = [p for p in pieces if any(c.isdigit() for c in p)]
    assert digits == list("190") + list("20") + list("1024"), pieces


def test_tokenizer_too_little_text_is_a_clear_error():
    with pytest.raises(ValueError, match="only supports .* tokens, not 1024"):
        train_tokenizer("gemma3", ["module a; endmodule"] * 10)


# --- determinism -----------------------------------------------------------------------------------------------------
def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    again = build_tiny_model("gemma4", tmp_path / "again", seed=0, corpus_dir=synth_corpus_dir)
    other = build_tiny_model("gemma4", tmp_path / "other", seed=1, corpus_dir=synth_corpus_dir)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_gemma4_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (tiny_gemma4_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_gemma4_dir / "tokenizer.json").read_bytes()


def test_default_corpus_is_generated_when_none_given(tmp_path):
    path = build_tiny_model("gemma3", tmp_path / "m", seed=0)
    tok = AutoTokenizer.from_pretrained(path)
    assert len(tok) == 1024
    assert tok.decode(tok(VERILOG, add_special_tokens=False)["input_ids"]) == VERILOG


# --- CLI -------------------------------------------------------------------------------------------------------------
def test_cli_tiny_builds_refuses_non_empty_out_and_forces(tmp_path, synth_corpus_dir, tiny_gemma3_dir):
    from crosstune.cli import _register, app

    _register()
    runner = CliRunner(env={"COLUMNS": "250"})  # rich would wrap error messages inside its box
    out = tmp_path / "tiny3"
    args = ["model", "tiny", "--family", "gemma3", "--out", str(out), "--corpus", str(synth_corpus_dir)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "362,432" in result.output and "sliding" in result.output and "model.safetensors" in result.output
    assert (out / "model.safetensors").read_bytes() == (tiny_gemma3_dir / "model.safetensors").read_bytes()

    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "holds an earlier output of crosstune model: pass --force" in refused.output
    forced = runner.invoke(app, [*args, "--force", "--seed", "3"])  # its own earlier build: replaced
    assert forced.exit_code == 0, forced.output
    assert (out / "model.safetensors").read_bytes() != (tiny_gemma3_dir / "model.safetensors").read_bytes()

    bad = runner.invoke(app, ["model", "tiny", "--family", "llama", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "unknown model family" in bad.output
