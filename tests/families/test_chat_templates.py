"""Golden renderings of the Gemma 3 / Gemma 4 chat templates, through the saved tiny tokenizers."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from crosstune.families import chat_template

SYSTEM = "You write synthesizable Verilog."
USER = "Write a 2-input AND gate."
ANSWER = "module and2(input a, input b, output y);\n  assign y = a & b;\nendmodule"
REASONING = "One continuous assignment is enough."


@pytest.fixture(scope="module")
def gemma3_tok(tiny_gemma3_dir):
    return AutoTokenizer.from_pretrained(tiny_gemma3_dir)


@pytest.fixture(scope="module")
def gemma4_tok(tiny_gemma4_dir):
    return AutoTokenizer.from_pretrained(tiny_gemma4_dir)


def render(tok, messages, **kwargs) -> str:
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


def test_saved_tokenizers_carry_the_family_templates(gemma3_tok, gemma4_tok):
    assert gemma3_tok.chat_template == chat_template("gemma3")
    assert gemma4_tok.chat_template == chat_template("gemma4")
    with pytest.raises(KeyError, match="gemma5"):
        chat_template("gemma5")


# --- Gemma 3 -----------------------------------------------------------------------------------------------------
def test_gemma3_system_folded_into_first_user_turn(gemma3_tok):
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ANSWER},
    ]
    assert render(gemma3_tok, msgs) == (
        f"<bos><start_of_turn>user\n{SYSTEM}\n\n{USER}<end_of_turn>\n<start_of_turn>model\n{ANSWER}<end_of_turn>\n"
    )


def test_gemma3_whitespace_rules(gemma3_tok):
    # Official rule: turn contents are trimmed, the system prefix is not.
    msgs = [
        {"role": "system", "content": " sys \n"},
        {"role": "user", "content": "\n  hi  \n"},
        {"role": "assistant", "content": "  ok\n\n"},
    ]
    assert render(gemma3_tok, msgs) == (
        "<bos><start_of_turn>user\n sys \n\n\nhi<end_of_turn>\n<start_of_turn>model\nok<end_of_turn>\n"
    )


def test_gemma3_multi_turn_with_generation_prompt(gemma3_tok):
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": [{"type": "text", "text": "c"}]},
    ]
    assert render(gemma3_tok, msgs, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n"
        "<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>model\n"
    )
    assert render(gemma3_tok, msgs[:1]) == "<bos><start_of_turn>user\na<end_of_turn>\n"


def test_gemma3_rejects_non_alternating_roles(gemma3_tok):
    with pytest.raises(Exception, match="alternate"):
        render(gemma3_tok, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


# --- Gemma 4 -----------------------------------------------------------------------------------------------------
def test_gemma4_system_turn_without_thinking(gemma4_tok):
    msgs = [
        {"role": "system", "content": f" {SYSTEM}\n"},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ANSWER},
    ]
    assert render(gemma4_tok, msgs) == (
        f"<bos><|turn>system\n{SYSTEM}<turn|>\n<|turn>user\n{USER}<turn|>\n<|turn>model\n{ANSWER}<turn|>\n"
    )
    # enable_thinking=False is the same as leaving it out
    assert render(gemma4_tok, msgs, enable_thinking=False) == render(gemma4_tok, msgs)


def test_gemma4_no_system_turn_unless_system_or_thinking(gemma4_tok):
    msgs = [{"role": "user", "content": USER}]
    assert render(gemma4_tok, msgs, add_generation_prompt=True) == f"<bos><|turn>user\n{USER}<turn|>\n<|turn>model\n"
    assert render(gemma4_tok, msgs, add_generation_prompt=True, enable_thinking=True) == (
        f"<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\n{USER}<turn|>\n<|turn>model\n"
    )


@pytest.mark.parametrize("field", ["reasoning_content", "thinking", "reasoning"])
def test_gemma4_thinking_and_reasoning_channel(gemma4_tok, field):
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ANSWER, field: REASONING},
    ]
    assert render(gemma4_tok, msgs, enable_thinking=True) == (
        f"<bos><|turn>system\n<|think|>\n{SYSTEM}<turn|>\n<|turn>user\n{USER}<turn|>\n"
        f"<|turn>model\n<|channel>thought\n{REASONING}\n<channel|>{ANSWER}<turn|>\n"
    )


def test_gemma4_multi_turn_renders_reasoning_of_last_model_turn_only(gemma4_tok):
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d", "reasoning_content": "new thoughts"},
    ]
    assert render(gemma4_tok, msgs) == (
        "<bos><|turn>user\na<turn|>\n<|turn>model\nb<turn|>\n"
        "<|turn>user\nc<turn|>\n<|turn>model\n<|channel>thought\nnew thoughts\n<channel|>d<turn|>\n"
    )
    assert render(gemma4_tok, msgs[:3], add_generation_prompt=True) == (
        "<bos><|turn>user\na<turn|>\n<|turn>model\nb<turn|>\n<|turn>user\nc<turn|>\n<|turn>model\n"
    )


def test_gemma4_strips_inline_thought_blocks_from_model_content(gemma4_tok):
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<|channel>thought\nhidden<channel|>  visible \n"},
    ]
    assert render(gemma4_tok, msgs) == "<bos><|turn>user\na<turn|>\n<|turn>model\nvisible<turn|>\n"


def test_gemma4_rejects_unsupported_roles(gemma4_tok):
    with pytest.raises(Exception, match="Unsupported role tool"):
        render(gemma4_tok, [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])


# --- rendered text tokenizes with exact offsets (what data preparation relies on) --------------------------------
@pytest.mark.parametrize("which", ["gemma3", "gemma4"])
def test_rendered_conversation_tokenizes_with_exact_offsets(which, gemma3_tok, gemma4_tok):
    tok = gemma3_tok if which == "gemma3" else gemma4_tok
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": ANSWER},
    ]
    text = render(tok, msgs)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert enc["input_ids"] == tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]
    assert enc["input_ids"][0] == tok.bos_token_id and enc["input_ids"].count(tok.bos_token_id) == 1
    pieces = [text[s:e] for s, e in enc["offset_mapping"]]
    assert "".join(pieces) == text  # ASCII text: offsets tile the string with no gaps or overlaps
    turn_end, turns = ("<end_of_turn>", 2) if which == "gemma3" else ("<turn|>", 3)  # Gemma 3 has no system turn
    end_id = tok.convert_tokens_to_ids(turn_end)
    assert [pieces[i] for i, t in enumerate(enc["input_ids"]) if t == end_id] == [turn_end] * turns
    answer_start = text.index(ANSWER)
    covered = "".join(p for (s, _), p in zip(enc["offset_mapping"], pieces, strict=True) if s >= answer_start)
    assert covered.startswith(ANSWER)
