"""Chat formatting of prepared data: golden texts and masked parts for Gemma 3 and Gemma 4, every system-prompt and
reasoning policy, and the malformed-markup rules."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from crosstune.data.bad_input import Ledger
from crosstune.data.conversation import ConversationBuilder, split_reasoning
from crosstune.data.encode import ChatEncoder
from crosstune.data.sources import RawRecord
from crosstune.families import get_family
from crosstune.recipe.schema import DataSection

SYSTEM = "You write Verilog."
PROMPT = "Write an AND gate."
REASONING = "One assign is enough."
ANSWER = "```verilog\nmodule and2(input a, b, output y); assign y = a & b; endmodule\n```"
RESPONSE = f"<think>\n{REASONING}\n</think>\n<answer>\n{ANSWER}\n</answer>"
RECORD = {"system": SYSTEM, "prompt": PROMPT, "response": RESPONSE}


@pytest.fixture(scope="module")
def tokenizers(tiny_gemma3_dir, tiny_gemma4_dir):
    return {
        "gemma3": AutoTokenizer.from_pretrained(tiny_gemma3_dir),
        "gemma4": AutoTokenizer.from_pretrained(tiny_gemma4_dir),
    }


def encode(tok, family: str, record: dict, **data) -> tuple[str, str]:
    """(rendered text, decoded text of the masked tokens, runs joined by '|')."""
    section = DataSection.model_validate({"sources": [{"path": "x.jsonl"}], **data})
    chat = get_family(family).chat
    builder = ConversationBuilder(section, (chat.turn_start, chat.turn_end), bool(chat.thought_start))
    ledger = Ledger(strict=True)
    conv = builder.build(RawRecord("t.jsonl:1", record), ledger)
    [enc] = ChatEncoder(tok, chat).encode([conv], ledger)
    runs, current = [], []
    for token, m in zip(enc.ids.tolist(), enc.mask.tolist(), strict=True):
        if m:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    text = tok.decode(enc.ids.tolist(), skip_special_tokens=False)
    return text, "|".join(tok.decode(r, skip_special_tokens=False) for r in runs)


G3_TURNS = "<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n{model}<end_of_turn>\n"


@pytest.mark.parametrize(
    ("policy", "text", "first_user"),
    [
        ("keep", None, f"{SYSTEM}\n\n{PROMPT}"),
        ("strip", None, PROMPT),
        ("replace", "Be brief.", f"Be brief.\n\n{PROMPT}"),
    ],
)
@pytest.mark.parametrize("reasoning", ["strip", "keep_inline"])
def test_gemma3_golden(tokenizers, policy, text, first_user, reasoning):
    rendered, masked = encode(
        tokenizers["gemma3"], "gemma3", RECORD, system_prompt={"policy": policy, "text": text}, reasoning=reasoning
    )
    model = ANSWER if reasoning == "strip" else RESPONSE  # keep_inline: the response verbatim (trimmed)
    assert rendered == "<bos>" + G3_TURNS.format(user=first_user, model=model)
    assert masked == f"{model}<end_of_turn>"


@pytest.mark.parametrize(
    ("policy", "text", "system_turn"),
    [
        ("keep", None, f"<|turn>system\n{SYSTEM}<turn|>\n"),
        ("strip", None, ""),
        ("replace", "Be brief.", "<|turn>system\nBe brief.<turn|>\n"),
    ],
)
@pytest.mark.parametrize("reasoning", ["strip", "keep_inline"])
def test_gemma4_golden_without_thought_channel(tokenizers, policy, text, system_turn, reasoning):
    rendered, masked = encode(
        tokenizers["gemma4"], "gemma4", RECORD, system_prompt={"policy": policy, "text": text}, reasoning=reasoning
    )
    model = ANSWER if reasoning == "strip" else RESPONSE
    assert rendered == f"<bos>{system_turn}<|turn>user\n{PROMPT}<turn|>\n<|turn>model\n{model}<turn|>\n"
    assert masked == f"{model}<turn|>"


@pytest.mark.parametrize(
    ("policy", "text", "system_text"),
    [("keep", None, SYSTEM), ("strip", None, ""), ("replace", "Be brief.", "Be brief.")],
)
def test_gemma4_golden_native_thought_channel(tokenizers, policy, text, system_text):
    rendered, masked = encode(
        tokenizers["gemma4"], "gemma4", RECORD, system_prompt={"policy": policy, "text": text}, reasoning="native"
    )
    thought = f"<|channel>thought\n{REASONING}\n<channel|>"
    # enable_thinking opens the system turn with <|think|> even when there is no system text.
    assert rendered == (
        f"<bos><|turn>system\n<|think|>\n{system_text}<turn|>\n<|turn>user\n{PROMPT}<turn|>\n"
        f"<|turn>model\n{thought}{ANSWER}<turn|>\n"
    )
    assert masked == f"{thought}{ANSWER}<turn|>"


def test_gemma4_native_without_reasoning_does_not_enable_thinking(tokenizers):
    rendered, masked = encode(
        tokenizers["gemma4"], "gemma4", {"prompt": PROMPT, "response": ANSWER, "system": None}, reasoning="native"
    )
    assert rendered == f"<bos><|turn>user\n{PROMPT}<turn|>\n<|turn>model\n{ANSWER}<turn|>\n"
    assert masked == f"{ANSWER}<turn|>"


def test_multi_turn_masks_every_assistant_turn_and_native_keeps_only_final_reasoning(tokenizers):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning": "r1"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "<think>r2</think>d"},
    ]
    rendered, masked = encode(
        tokenizers["gemma4"], "gemma4", {"messages": messages}, columns={"preset": "messages"}, reasoning="native"
    )
    assert rendered == (
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\na<turn|>\n<|turn>model\nb<turn|>\n"
        "<|turn>user\nc<turn|>\n<|turn>model\n<|channel>thought\nr2\n<channel|>d<turn|>\n"
    )
    assert masked == "b<turn|>|<|channel>thought\nr2\n<channel|>d<turn|>"
    rendered, masked = encode(tokenizers["gemma3"], "gemma3", {"messages": messages}, columns={"preset": "messages"})
    assert masked == "b<end_of_turn>|d<end_of_turn>"


def test_qa_preset(tokenizers):
    rendered, masked = encode(
        tokenizers["gemma3"], "gemma3", {"question": "q?", "answer": "a."}, columns={"preset": "qa"}
    )
    assert rendered == "<bos>" + G3_TURNS.format(user="q?", model="a.")
    assert masked == "a.<end_of_turn>"


@pytest.mark.parametrize(
    ("text", "reasoning", "answer", "rules"),
    [
        ("<think>r</think>a", "r", "a", []),
        ("plain answer", "", "plain answer", []),
        ("<think>r</think><answer>x</answer>", "r", "x", []),
        ("<think>r</think>pre <answer>x</answer> post", "r", "pre x post", []),
        ("r</think>a", "r", "a", ["close_without_open"]),
        ("a<think>r never closed", "r never closed", "a", ["unclosed_think"]),
        ("<think>r1</think>a<think>r2</think>b", "r1\n\nr2", "ab", ["multiple_think"]),
        ("<think>r<think>s</think>a", "r\n\ns", "a", ["nested_think"]),
        ("<think>r</think>a</think>b", "r", "ab", ["stray_close_think"]),
        ("<think>r</think><answer>x</answer><answer>y</answer>", "r", "y", ["multiple_answer"]),
        ("<think>r</think><answer>x", "r", "x", ["unbalanced_answer"]),
        ("x</answer>", "", "x", ["unbalanced_answer"]),
        ("<think>only</think>", "only", "", []),
    ],
)
def test_malformed_markup_rules(text, reasoning, answer, rules):
    assert split_reasoning(text) == (reasoning, answer, rules)


def test_reasoning_field_goes_inline_under_keep_inline(tokenizers):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "why"}]
    _, masked = encode(
        tokenizers["gemma3"], "gemma3", {"messages": messages}, columns={"preset": "messages"}, reasoning="keep_inline"
    )
    assert masked == "<think>\nwhy\n</think>\n\na<end_of_turn>"
