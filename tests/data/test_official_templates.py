"""Data preparation with Google's published chat templates (tests/fixtures/chat_templates): what is trained is
what a server rendering that template shows the model — exact masks, and train↔serve token equality per row."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from crosstune.data import DataError, chat_template_hash, load_prepared, prepare_dataset
from crosstune.data.bad_input import Ledger
from crosstune.data.conversation import ConversationBuilder
from crosstune.data.encode import ChatEncoder
from crosstune.data.sources import RawRecord, read_split
from crosstune.families import get_family
from crosstune.recipe.schema import DataSection
from tests.helpers import paths
from tests.helpers.data import recipe_for, write_jsonl

FIXTURES = paths.FIXTURES / "chat_templates"
TEMPLATES = {"gemma4_31b_it": "gemma4", "gemma4_e2b_it": "gemma4", "gemma3_it": "gemma3"}
SYSTEM, PROMPT, REASONING = "You write Verilog.", "Write a buffer.", "One assign is enough."
ANSWER = "```verilog\nmodule buf1(input a, output y); assign y = a; endmodule\n```"
RECORD = {"system": SYSTEM, "prompt": PROMPT, "response": f"<think>\n{REASONING}\n</think>\n{ANSWER}"}
MULTI_TURN = {
    "messages": [
        {"role": "user", "content": "Name a gate."},
        {"role": "assistant", "content": "<think>pick one</think>AND"},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": f"<think>{REASONING}</think>{ANSWER}"},
    ]
}
G4_PROMPT = f"<bos><|turn>system\n{SYSTEM}<turn|>\n<|turn>user\n{PROMPT}<turn|>\n<|turn>model\n"
G4_THINKING_PROMPT = f"<bos><|turn>system\n<|think|>\n{SYSTEM}<turn|>\n<|turn>user\n{PROMPT}<turn|>\n<|turn>model\n"
THOUGHT = f"<|channel>thought\n{REASONING}\n<channel|>"
EMPTY_THOUGHT = "<|channel>thought\n<channel|>"
GOLDEN = {  # (template, reasoning policy) -> (the row's text, its trained text)
    ("gemma4_31b_it", "strip"): (f"{G4_PROMPT}{EMPTY_THOUGHT}{ANSWER}<turn|>\n", f"{ANSWER}<turn|>"),
    ("gemma4_31b_it", "native"): (f"{G4_THINKING_PROMPT}{THOUGHT}{ANSWER}<turn|>\n", f"{THOUGHT}{ANSWER}<turn|>"),
    ("gemma4_e2b_it", "strip"): (f"{G4_PROMPT}{ANSWER}<turn|>\n", f"{ANSWER}<turn|>"),
    ("gemma4_e2b_it", "native"): (f"{G4_THINKING_PROMPT}{THOUGHT}{ANSWER}<turn|>\n", f"{THOUGHT}{ANSWER}<turn|>"),
    ("gemma3_it", "strip"): (
        f"<bos><start_of_turn>user\n{SYSTEM}\n\n{PROMPT}<end_of_turn>\n<start_of_turn>model\n{ANSWER}<end_of_turn>\n",
        f"{ANSWER}<end_of_turn>",
    ),
}
POLICIES = [("gemma4_31b_it", "strip"), ("gemma4_31b_it", "native"), ("gemma4_e2b_it", "strip")]
POLICIES += [("gemma4_e2b_it", "native"), ("gemma3_it", "strip"), ("gemma3_it", "keep_inline")]


@pytest.fixture(scope="module")
def tokenizers(tiny_gemma3_dir, tiny_gemma4_dir):
    """The tiny tokenizers, each with every official template of its family (by fixture name)."""
    out = {}
    for name, family in TEMPLATES.items():
        tok = AutoTokenizer.from_pretrained(tiny_gemma3_dir if family == "gemma3" else tiny_gemma4_dir)
        tok.chat_template = (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")
        out[name] = tok
    return out


def model_dir(name: str, tiny_gemma3_dir: Path, tiny_gemma4_dir: Path) -> Path:
    return tiny_gemma3_dir if TEMPLATES[name] == "gemma3" else tiny_gemma4_dir


def documents(prepared) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(record source, token ids, loss mask) of every prepared document, read back from the packed rows."""
    split = prepared.split("train")
    docs, rows = split.docs, split.rows(range(len(split)))
    out = []
    table = zip(docs["doc_row"], docs["doc_start"], docs["doc_length"], docs["doc_index"], strict=True)
    for r, start, length, index in table:
        cut = slice(int(start), int(start + length))
        out.append((split.record_sources[index], rows["input_ids"][r, cut], rows["loss_mask"][r, cut]))
    return out


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of trained tokens."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.nonzero(edges == 1)[0].tolist(), np.nonzero(edges == -1)[0].tolist(), strict=True))


def test_fixtures_are_the_published_text_named_in_the_readme():
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name in TEMPLATES:
        digest = hashlib.sha256((FIXTURES / f"{name}.jinja").read_bytes()).hexdigest()
        assert re.search(rf"`{name}\.jinja` \|[^\n]*\| {digest} \|", readme), f"{name}.jinja differs from its source"


@pytest.mark.parametrize(("name", "policy"), list(GOLDEN))
def test_exact_rows_and_masks(tmp_path, tokenizers, tiny_gemma3_dir, tiny_gemma4_dir, name, policy):
    # gemma4_31b_it/strip: strict preparation used to stop here ("the chat template is not prefix-stable").
    tok = tokenizers[name]
    src = write_jsonl(tmp_path / "d.jsonl", [RECORD])
    recipe = recipe_for(
        tmp_path,
        model_dir(name, tiny_gemma3_dir, tiny_gemma4_dir),
        TEMPLATES[name],
        [{"path": str(src)}],
        max_seq_len=256,
        reasoning=policy,
    )
    [(_, ids, mask)] = documents(prepare_dataset(recipe, tokenizer=tok))
    row, trained = GOLDEN[name, policy]
    assert tok.decode(ids.tolist(), skip_special_tokens=False) == row
    [(a, b)] = runs(mask)
    assert tok.decode(ids[a:b].tolist(), skip_special_tokens=False) == trained
    assert b == len(ids) - 1  # the "\n" after the end-of-turn marker is in the row, not trained


def as_messages(record: dict) -> dict:
    return {
        "messages": [
            {"role": "system", "content": record["system"]},
            {"role": "user", "content": record["prompt"]},
            {"role": "assistant", "content": record["response"]},
        ]
    }


@pytest.mark.parametrize(("name", "policy"), POLICIES)
def test_every_trained_span_follows_its_served_prompt_token_for_token(
    tmp_path, tokenizers, tiny_gemma3_dir, tiny_gemma4_dir, synth_corpus_dir, name, policy
):
    tok, family = tokenizers[name], get_family(TEMPLATES[name])
    lines = (synth_corpus_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()[:16]
    records = [as_messages(json.loads(line)) for line in lines] + [MULTI_TURN, {"messages": MULTI_TURN["messages"][2:]}]
    src = write_jsonl(tmp_path / "d.jsonl", records)
    recipe = recipe_for(
        tmp_path,
        model_dir(name, tiny_gemma3_dir, tiny_gemma4_dir),
        family.name,
        [{"path": str(src)}],
        max_seq_len=2048,
        reasoning=policy,
        columns={"preset": "messages"},
    )
    prepared = prepare_dataset(recipe, tokenizer=tok)  # strict: the old code stopped here for gemma4_31b_it
    ledger, chat = Ledger(strict=True), family.chat
    builder = ConversationBuilder(recipe.data, (chat.turn_start, chat.turn_end), bool(chat.thought_start))
    convs = {r.where: builder.build(r, ledger) for r in read_split(recipe, "train", ledger)[0]}
    turn_end = tok.convert_tokens_to_ids(chat.turn_end)
    docs = documents(prepared)
    assert len(docs) == len(records)
    for where, ids, mask in docs:
        conv = convs[where]
        served = [  # the served prompt's tokens for each assistant message, as a server renders them
            tok.apply_chat_template(
                conv.messages[:i], add_generation_prompt=True, tokenize=True, return_dict=True, **conv.template_kwargs
            )["input_ids"]
            for i, m in enumerate(conv.messages)
            if m["role"] == "assistant"
        ]
        spans = runs(mask)
        assert ids[: spans[-1][0]].tolist() == served[-1], where  # the final answer follows its served prompt
        assert spans[-1][1] == len(ids) - 1, where  # ... through the end-of-turn marker; the "\n" after it is not
        for a, b in spans:  # every trained answer follows one of the served prompts and ends at the marker
            assert ids[:a].tolist() in served and ids[b - 1] == turn_end, where
        untrained = 1 if (name, policy) == ("gemma4_31b_it", "strip") else 0  # see the next test
        assert len(spans) == len(served) - (untrained if len(served) > 1 else 0), where
    stats = prepared.stats["splits"]["train"]
    assert stats["untrained_turns"] == (1 if (name, policy) == ("gemma4_31b_it", "strip") else 0)
    assert stats["straddling_tokens"] == 0


def test_31b_multi_turn_without_thinking_trains_only_turns_served_as_rendered(tmp_path, tokenizers, tiny_gemma4_dir):
    """The history renders the first answer without the empty thought block its own served prompt has, so that
    answer is context only; the final answer follows exactly its served prompt."""
    tok = tokenizers["gemma4_31b_it"]
    src = write_jsonl(tmp_path / "m.jsonl", [MULTI_TURN])
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(src)}], columns={"preset": "messages"})
    [(_, ids, mask)] = documents(prepare_dataset(recipe, tokenizer=tok))
    history = "<bos><|turn>user\nName a gate.<turn|>\n<|turn>model\nAND<turn|>\n"
    assert tok.decode(ids.tolist(), skip_special_tokens=False) == (
        f"{history}<|turn>user\n{PROMPT}<turn|>\n<|turn>model\n{EMPTY_THOUGHT}{ANSWER}<turn|>\n"
    )
    [(a, b)] = runs(mask)
    assert tok.decode(ids[a:b].tolist(), skip_special_tokens=False) == f"{ANSWER}<turn|>"


def test_manifest_records_the_chat_template_hash(tmp_path, tokenizers, tiny_gemma4_dir):
    src = write_jsonl(tmp_path / "d.jsonl", [RECORD])
    hashes = {}
    for name in ("gemma4_31b_it", "gemma4_e2b_it"):
        recipe = recipe_for(tmp_path / name, tiny_gemma4_dir, "gemma4", [{"path": str(src)}])
        prepared = prepare_dataset(recipe, tokenizer=tokenizers[name])
        hashes[name] = prepared.manifest["chat_template_sha256"]
        assert hashes[name] == hashlib.sha256((FIXTURES / f"{name}.jinja").read_bytes()).hexdigest()
        assert hashes[name] == prepared.chat_template_sha256 == chat_template_hash(tokenizers[name])
    assert hashes["gemma4_31b_it"] != hashes["gemma4_e2b_it"]
    manifest_file = prepared.path / "manifest.json"  # a preparation from before the hash was recorded is stale
    manifest = json.loads(manifest_file.read_text())
    del manifest["chat_template_sha256"]
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="stale: it records no chat_template_sha256"):
        load_prepared(recipe, tokenizer=tokenizers["gemma4_e2b_it"])


def test_a_template_of_another_family_is_a_clear_error(tmp_path, tiny_gemma4_dir):
    tok = AutoTokenizer.from_pretrained(tiny_gemma4_dir)
    tok.chat_template = (FIXTURES / "gemma3_it.jinja").read_text(encoding="utf-8")
    src = write_jsonl(tmp_path / "d.jsonl", [RECORD])
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(src)}])
    with pytest.raises(DataError, match=r"d\.jsonl:1: assistant message 2 .* does not open with '<\|turn>model\\n'"):
        prepare_dataset(recipe, tokenizer=tok)


def render_both(ours, official, messages: list[dict], **kwargs) -> tuple[str, str]:
    return tuple(t.apply_chat_template(messages, tokenize=False, **kwargs) for t in (ours, official))


@pytest.mark.parametrize(
    ("name", "thinking"),
    [("gemma4_31b_it", False), ("gemma4_31b_it", True), ("gemma4_e2b_it", False), ("gemma4_e2b_it", True)]
    + [("gemma3_it", False)],
)
def test_crosstune_templates_render_conversations_like_the_official_ones(
    tokenizers, tiny_gemma3_dir, tiny_gemma4_dir, name, thinking
):
    """What crosstune's own templates train on is what Google's render; only the 31B generation prompt differs."""
    ours = AutoTokenizer.from_pretrained(model_dir(name, tiny_gemma3_dir, tiny_gemma4_dir))
    kwargs = {"enable_thinking": True} if thinking else {}
    final = {"role": "assistant", "content": ANSWER, **({"reasoning": REASONING} if thinking else {})}
    for history in (
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        [*MULTI_TURN["messages"][:2], {"role": "user", "content": PROMPT}],
    ):
        mine, official = render_both(ours, tokenizers[name], [*history, final], **kwargs)
        assert mine == official
        mine, official = render_both(ours, tokenizers[name], history, add_generation_prompt=True, **kwargs)
        assert official == mine + (EMPTY_THOUGHT if (name, thinking) == ("gemma4_31b_it", False) else "")


# Unicode text without surrogates or control characters, with whitespace at the edges the templates trim.
TEXT = st.text(
    alphabet=st.characters(exclude_categories=("Cs", "Cc"), include_characters="\n\t <>/"), min_size=1, max_size=30
).filter(lambda s: s.strip() and not any(tag in s for tag in ("<think>", "</think>", "<answer>", "</answer>")))


@st.composite
def random_records(draw):
    name = draw(st.sampled_from(list(TEMPLATES)))
    policy = draw(st.sampled_from(["strip", "keep_inline", "native"] if TEMPLATES[name] == "gemma4" else ["strip"]))
    messages = [{"role": "system", "content": draw(TEXT)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(TEXT)})
        reasoning = draw(st.one_of(st.none(), TEXT))
        answer = draw(TEXT)
        messages.append(
            {"role": "assistant", "content": answer if reasoning is None else f"<think>{reasoning}</think>{answer}"}
        )
    return name, policy, messages


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_records())
def test_random_conversations_train_what_is_served(tokenizers, case):
    name, policy, messages = case
    tok, chat = tokenizers[name], get_family(TEMPLATES[name]).chat
    control = (*tok.all_special_tokens, chat.turn_start, chat.turn_end)
    assume(not any(c in m["content"] for m in messages for c in control))
    section = DataSection.model_validate(
        {"sources": [{"path": "x"}], "columns": {"preset": "messages"}, "reasoning": policy}
    )
    ledger = Ledger(strict=True)
    conv = ConversationBuilder(section, control, bool(chat.thought_start)).build(
        RawRecord("r:1", {"messages": messages}), ledger
    )
    [enc] = ChatEncoder(tok, chat).encode([conv], ledger)
    served = [
        tok.apply_chat_template(
            conv.messages[:i], add_generation_prompt=True, tokenize=True, return_dict=True, **conv.template_kwargs
        )["input_ids"]
        for i, m in enumerate(conv.messages)
        if m["role"] == "assistant"
    ]
    spans = runs(enc.mask)
    assert enc.ids[: spans[-1][0]].tolist() == served[-1]
    for a, b in spans:
        assert enc.ids[:a].tolist() in served and enc.ids[b - 1] == tok.convert_tokens_to_ids(chat.turn_end)
    thinking = conv.template_kwargs.get("enable_thinking", False)
    untrained = len(served) - 1 if (name, thinking) == ("gemma4_31b_it", False) else 0
    assert enc.untrained_turns == untrained == len(served) - len(spans)
    assert enc.straddling == 0
