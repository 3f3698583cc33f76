"""Property tests over random conversations and documents: exact assistant masks, lossless packing, faithful decode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from crosstune.data.bad_input import Ledger
from crosstune.data.conversation import ConversationBuilder
from crosstune.data.encode import ChatEncoder
from crosstune.data.packing import best_fit_decreasing, build_rows
from crosstune.data.sources import RawRecord
from crosstune.families import get_family
from crosstune.recipe.schema import DataSection

PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MARKUP = ("<think>", "</think>", "<answer>", "</answer>")

# Unicode text without surrogates or control characters; an occasional markup-looking "<" stays in.
text = st.text(
    alphabet=st.characters(exclude_categories=("Cs", "Cc"), include_characters="\n\t <>/"), min_size=1, max_size=30
).filter(lambda s: s.strip())


@pytest.fixture(scope="module")
def tokenizers(tiny_gemma3_dir, tiny_gemma4_dir):
    return {
        "gemma3": AutoTokenizer.from_pretrained(tiny_gemma3_dir),
        "gemma4": AutoTokenizer.from_pretrained(tiny_gemma4_dir),
    }


@st.composite
def conversations(draw):
    family = draw(st.sampled_from(["gemma3", "gemma4"]))
    reasoning_policy = draw(
        st.sampled_from(["strip", "keep_inline", "native"] if family == "gemma4" else ["strip", "keep_inline"])
    )
    messages = [{"role": "system", "content": draw(text)}] if draw(st.booleans()) else []
    turns = draw(st.integers(1, 3))
    for _ in range(turns):
        messages.append({"role": "user", "content": draw(text)})
        answer = draw(text)
        reasoning = draw(st.one_of(st.none(), text))
        content = f"<think>{reasoning}</think>{answer}" if reasoning is not None else answer
        messages.append({"role": "assistant", "content": content})
    return family, reasoning_policy, messages


def expected_assistant_parts(family: str, policy: str, messages: list[dict]) -> list[str]:
    """What each assistant turn should contribute to the mask, written from the template's rules, not rendered."""
    chat = get_family(family).chat
    parts, last = [], max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        content = m["content"]
        reasoning = content[len("<think>") : content.index("</think>")].strip() if "</think>" in content else ""
        answer = content.split("</think>", 1)[1].strip() if "</think>" in content else content.strip()
        if policy == "keep_inline":
            parts.append(content.strip() + chat.turn_end)
        elif policy == "native" and reasoning and i == last:
            parts.append(f"{chat.thought_start}thought\n{reasoning}\n{chat.thought_end}{answer}{chat.turn_end}")
        else:
            parts.append(answer + chat.turn_end)
    return parts


@PROPS
@given(conversations())
def test_mask_is_exactly_the_assistant_tokens_and_decode_reproduces_the_text(tokenizers, case):
    family, policy, messages = case
    for m in messages:
        assume(not any(tag in m["content"] for tag in MARKUP[2:]))  # answer markup has its own tests
        if m["role"] == "assistant" and "</think>" in m["content"]:
            assume(not any(tag in m["content"].split("<think>", 1)[1] for tag in MARKUP[:1]))
            assume(
                m["content"].split("</think>", 1)[1].strip() and "</think>" not in m["content"].split("</think>", 1)[1]
            )
        elif m["role"] == "assistant":
            assume(not any(tag in m["content"] for tag in MARKUP[:2]))
    tok, chat = tokenizers[family], get_family(family).chat
    control = tuple(tok.all_special_tokens) + (chat.turn_start, chat.turn_end)
    for m in messages:
        assume(not any(c in m["content"] for c in control))
    section = DataSection.model_validate(
        {"sources": [{"path": "x"}], "columns": {"preset": "messages"}, "reasoning": policy}
    )
    ledger = Ledger(strict=True)
    conv = ConversationBuilder(section, control, bool(chat.thought_start)).build(
        RawRecord("p:1", {"messages": messages}), ledger
    )
    encoder = ChatEncoder(tok, chat)
    [(rendered, _)] = encoder.render([conv], ledger)
    [enc] = encoder.encode([conv], ledger)

    assert tok.decode(enc.ids.tolist(), skip_special_tokens=False) == rendered
    runs = np.split(np.arange(len(enc.mask)), np.nonzero(np.diff(enc.mask.astype(int)))[0] + 1)
    masked = [tok.decode(enc.ids[r].tolist(), skip_special_tokens=False) for r in runs if enc.mask[r[0]]]
    assert masked == expected_assistant_parts(family, policy, messages)
    assert enc.straddling == 0
    assert enc.ids[enc.mask == 1][-1] == tok.convert_tokens_to_ids(chat.turn_end)  # the stop token is a target


@st.composite
def documents(draw):
    capacity = draw(st.integers(4, 64))
    lengths = draw(st.lists(st.integers(1, capacity), min_size=0, max_size=40))
    return capacity, lengths


@PROPS
@given(documents(), st.booleans())
def test_packing_keeps_every_token_once_in_order_with_restarting_segments(case, packing):
    capacity, lengths = case
    rng = np.random.default_rng(len(lengths))
    docs, next_id = [], 1
    for n in lengths:  # distinct ids: a lost, duplicated or reordered token shows
        docs.append((np.arange(next_id, next_id + n, dtype=np.int32), rng.integers(0, 2, n).astype(np.uint8)))
        next_id += n
    rows = build_rows(docs, [False] * len(docs), capacity, packing, pad_id=0)

    seen = []
    for r in range(rows.input_ids.shape[0]):
        seg, pos, ids, mask = rows.segment_ids[r], rows.positions[r], rows.input_ids[r], rows.loss_mask[r]
        used = int(np.count_nonzero(seg))
        assert used > 0 and not seg[used:].any() and not ids[used:].any() and not mask[used:].any()
        k = int(seg[used - 1])
        assert list(np.unique(seg[:used])) == list(range(1, k + 1)) and np.all(np.diff(seg[:used]) >= 0)
        for s in range(1, k + 1):
            where = np.nonzero(seg == s)[0]
            assert np.array_equal(pos[where], np.arange(len(where)))
            doc = next(i for i, (d, _) in enumerate(docs) if d[0] == ids[where[0]])
            assert np.array_equal(ids[where], docs[doc][0]) and np.array_equal(mask[where], docs[doc][1])
            seen.append(doc)
    assert sorted(seen) == list(range(len(docs)))
    assert sorted(rows.doc_index.tolist()) == list(range(len(docs)))
    if not packing:
        assert rows.input_ids.shape[0] == len(docs)


@PROPS
@given(documents())
def test_best_fit_decreasing_respects_capacity_and_cannot_merge_two_rows(case):
    capacity, lengths = case
    bins = best_fit_decreasing(lengths, capacity)
    loads = sorted(sum(lengths[i] for i in b) for b in bins)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(load <= capacity for load in loads)
    assert len(loads) < 2 or loads[0] + loads[1] > capacity  # any two rows that could merge would be a miss


@PROPS
@given(st.sampled_from(["gemma3", "gemma4"]), text, st.lists(st.integers(0, 200), min_size=2, max_size=6))
def test_edge_lookup_mask_equals_the_full_offset_map_mask_even_when_tokens_straddle(tokenizers, family, s, cuts):
    """Spans at arbitrary characters (inside words, inside multi-byte characters): both mask routines agree."""
    from crosstune.data.encode import encoding_mask, spans_to_mask

    enc = tokenizers[family].backend_tokenizer.encode(s * 3, add_special_tokens=False)
    n = len(s) * 3
    edges = sorted({min(c, n) for c in cuts})
    spans = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=False) if a < b]
    fast_mask, fast_straddling = encoding_mask(enc, spans, n)
    full_mask, full_straddling = spans_to_mask(np.asarray(enc.offsets).reshape(-1, 2), spans)
    assert np.array_equal(fast_mask, full_mask) and fast_straddling == full_straddling
