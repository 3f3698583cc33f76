"""Turn a raw record into chat messages: column mapping, system-prompt policy and reasoning policy.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.data.conversation"."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from crosstune.data.bad_input import DataError, Ledger
from crosstune.data.sources import LENIENT_HINT, RawRecord
from crosstune.recipe.schema import DataSection

THINK_TAG = re.compile(r"</?think>")
ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
ANSWER_TAG = re.compile(r"</?answer>")
REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")
# The markup a CodeV-R1-style system prompt asks the answer to be written in (tag -> how a message names it).
PROMPTED_TAGS = {"<think>": "<think>…</think>", "<answer>": "<answer>…</answer>"}
EMPTY_THINK = "<think>\n</think>\n"
ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}  # ShareGPT's role names, as Axolotl's chat_template reads them


@dataclass
class Conversation:
    where: str
    messages: list[dict]  # {"role", "content"} (+ "reasoning" on the final assistant turn under `native`)
    template_kwargs: dict = field(default_factory=dict)
    malformed: list[str] = field(default_factory=list)
    # tags the system prompt asks for that the final assistant message (the trained target) does not contain
    missing_tags: tuple[str, ...] = ()


def split_reasoning(text: str) -> tuple[str, str, list[str]]:
    """(reasoning, answer, malformed rule names) of an assistant text, by the rules in the module docstring."""
    malformed: list[str] = []
    reasoning: list[str] = []
    answer: list[str] = []
    pos, inside, blocks = 0, False, 0
    for m in THINK_TAG.finditer(text):
        (reasoning if inside else answer).append(text[pos : m.start()])
        pos = m.end()
        if m.group() == "<think>":
            if inside:
                malformed.append("nested_think")
            else:
                inside, blocks = True, blocks + 1
        elif inside:
            inside = False
        elif blocks == 0:
            reasoning += answer  # the generation prompt opened this block
            answer.clear()
            blocks = 1
            malformed.append("close_without_open")
        else:
            malformed.append("stray_close_think")
    (reasoning if inside else answer).append(text[pos:])
    if inside:
        malformed.append("unclosed_think")
    if blocks > 1:
        malformed.append("multiple_think")
    return "\n\n".join(r.strip() for r in reasoning if r.strip()), _unwrap_answer("".join(answer), malformed), malformed


def _unwrap_answer(text: str, malformed: list[str]) -> str:
    blocks = ANSWER_BLOCK.findall(text)
    if len(blocks) > 1:
        malformed.append("multiple_answer")
        text = blocks[-1]
    elif blocks:
        text = ANSWER_BLOCK.sub(lambda m: m.group(1), text)
    if ANSWER_TAG.search(text):
        malformed.append("unbalanced_answer")
        text = ANSWER_TAG.sub("", text)
    return text.strip()


class ConversationBuilder:
    """Applies one recipe's column mapping and policies to raw records; bad records go to the ledger."""

    def __init__(self, data: DataSection, control_tokens: tuple[str, ...], has_thought_channel: bool):
        cols = data.columns.resolved()
        if not cols["messages"] and not (cols["prompt"] and cols["response"]):
            raise DataError(
                "data.columns",
                f"preset {data.columns.preset!r} names neither a messages column nor prompt+response columns",
                hint="set columns.messages, or columns.prompt and columns.response",
            )
        if data.reasoning == "native" and not has_thought_channel:
            raise DataError("data.reasoning", "native reasoning needs a family with a thought channel (gemma4)")
        self.data, self.cols = data, cols
        self.role_key, self.content_key = data.columns.message_keys
        # One alternation for all control tokens: real tokenizers list dozens, checked in every field of every record.
        self.control = (
            re.compile("|".join(map(re.escape, sorted(control_tokens, key=len, reverse=True))))
            if control_tokens
            else None
        )

    def build(self, record: RawRecord, ledger: Ledger) -> Conversation | None:
        try:
            messages = self._messages(record.row) if self.cols["messages"] else self._single_turn(record.row)
            return self._apply_policies(record.where, messages)
        except _BadRecord as bad:
            ledger.bad(record.where, bad.kind, bad.reason, bad.field_name, hint=LENIENT_HINT)
            return None

    # --- raw row -> messages (each with the name of the field its content came from) --------------------------
    def _single_turn(self, row: dict) -> list[tuple[dict, str]]:
        prompt, response = self.cols["prompt"], self.cols["response"]
        if isinstance(row.get(prompt), list) and isinstance(row.get(response), list):
            # TRL's conversational prompt-completion: each column a list of messages
            return self._message_list(row, prompt, end=False) + self._message_list(row, response, first=False)
        messages = []
        system_col = self.cols["system"]
        if system_col and row.get(system_col) is not None:
            messages.append(({"role": "system", "content": self._text(row, system_col, allow_empty=True)}, system_col))
        messages.append(({"role": "user", "content": self._text(row, self.cols["prompt"])}, self.cols["prompt"]))
        response = self.cols["response"]
        messages.append(({"role": "assistant", "content": self._text(row, response)}, response))
        return messages

    def _messages(self, row: dict) -> list[tuple[dict, str]]:
        return self._message_list(row, self.cols["messages"])

    def _message_list(self, row: dict, col: str, first: bool = True, end: bool = True) -> list[tuple[dict, str]]:
        """The messages of column `col` (`first`: it opens the conversation; `end`: it must end with an answer)."""
        if col not in row:
            raise _BadRecord("missing_field", "missing", col)
        value = row[col]
        if not isinstance(value, list) or not value:
            raise _BadRecord("wrong_type", f"expected a non-empty list of messages, got {_kind(value)}", col)
        out = []
        role_key, content_key = self.role_key, self.content_key
        for i, msg in enumerate(value):
            name = f"{col}[{i}]"
            if not isinstance(msg, dict):
                raise _BadRecord("wrong_type", f"expected a message object, got {_kind(msg)}", name)
            role = msg.get(role_key)
            role = SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role
            if role not in ROLES or (role == "system" and (i > 0 or not first)):
                allowed = "system (first message only), user or assistant"
                raise _BadRecord("bad_role", f"role {role!r} is not {allowed}", f"{name}.{role_key}")
            text = self._text(msg, content_key, prefix=f"{name}.", allow_empty=role != "user")
            item = {"role": role, "content": text}
            for key in REASONING_FIELDS:
                if role == "assistant" and msg.get(key) is not None:
                    item["reasoning"] = self._text(msg, key, prefix=f"{name}.", allow_empty=True)
                    break
            out.append((item, f"{name}.{content_key}"))
        if end and out[-1][0]["role"] != "assistant":
            raise _BadRecord("bad_role", "the conversation must end with an assistant message", f"{col}[-1].{role_key}")
        return out

    def _text(self, row: dict, key: str, prefix: str = "", allow_empty: bool = False) -> str:
        name = prefix + key
        if key not in row:
            raise _BadRecord("missing_field", "missing", name)
        value = row[key]
        if not isinstance(value, str):
            raise _BadRecord("wrong_type", f"expected a string, got {_kind(value)}", name)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON escapes can smuggle in lone surrogates
            raise _BadRecord("invalid_utf8", f"not valid UTF-8 (lone surrogate at character {e.start})", name) from None
        if not allow_empty and not value.strip():
            raise _BadRecord("empty_field", "empty", name)
        if self.control and (hit := self.control.search(value)):  # it would be encoded as the control token
            raise _BadRecord("control_token", f"contains the chat control token {hit.group()!r}", name)
        return value

    # --- policies ---------------------------------------------------------------------------------------------------
    def _apply_policies(self, where: str, messages: list[tuple[dict, str]]) -> Conversation:
        system = messages[0][0]["content"] if messages[0][0]["role"] == "system" else None
        body = messages[1:] if system is not None else messages
        policy = self.data.system_prompt
        system = {"keep": system, "strip": None, "replace": policy.text}[policy.policy]
        out = [{"role": "system", "content": system}] if system and system.strip() else []
        users = [i for i, (m, _) in enumerate(body) if m["role"] == "user"]
        last_user = users[-1] if users else -1
        malformed: list[str] = []
        thinking = False
        for i, (msg, field_name) in enumerate(body):
            if msg["role"] != "assistant":
                out.append(msg)
                continue
            reasoning, answer, rules = split_reasoning(msg["content"])
            malformed += rules
            if msg.get("reasoning", "").strip():
                reasoning = "\n\n".join(r for r in (msg["reasoning"].strip(), reasoning) if r)
            if not answer:
                once = " once the reasoning is removed" if reasoning else ""
                raise _BadRecord("empty_answer", f"the answer is empty{once}", field_name)
            if self.data.reasoning == "strip" and self.data.answer_markup == "tags":
                out.append({"role": "assistant", "content": f"{EMPTY_THINK}<answer>\n{answer}\n</answer>"})
            elif self.data.reasoning == "keep_inline":
                content = msg["content"]
                if msg.get("reasoning", "").strip():  # a separate reasoning field goes inline, in CodeV-R1 markup
                    content = f"<think>\n{msg['reasoning'].strip()}\n</think>\n\n{content}"
                out.append({"role": "assistant", "content": content})
            elif self.data.reasoning == "native" and reasoning and i > last_user:
                # Only the final answer keeps its reasoning: the template renders no other turn's thought channel.
                out.append({"role": "assistant", "content": answer, "reasoning": reasoning})
                thinking = True
            else:
                out.append({"role": "assistant", "content": answer})
        kwargs = {"enable_thinking": True} if thinking else {}  # `<|think|>` only where a thought channel follows
        asked = [tag for tag in PROMPTED_TAGS if system and tag in system]
        missing = tuple(tag for tag in asked if tag not in out[-1]["content"])
        return Conversation(where, out, kwargs, sorted(set(malformed)), missing)


class _BadRecord(Exception):
    def __init__(self, kind: str, reason: str, field_name: str | None):
        self.kind, self.reason, self.field_name = kind, reason, field_name


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def prompt_target_warning(convs: list[Conversation], data: DataSection, split: str) -> str | None:
    """The warning for records whose (kept or replaced) system prompt asks for <think>/<answer> tags that the trained
    target lacks: a model trained on them learns to disobey its system prompt. None when every record agrees."""
    bad = [c for c in convs if c.missing_tags]
    if not bad:
        return None
    tags = [PROMPTED_TAGS[t] for t in PROMPTED_TAGS if any(t in c.missing_tags for c in bad)]
    setting = f"data.reasoning {data.reasoning}"
    if data.reasoning == "strip":
        setting += f" (answer_markup {data.answer_markup})"
    return (
        f"{split}: in {len(bad):,} of {len(convs):,} records (first: {bad[0].where}) the system prompt "
        f"(data.system_prompt.policy {data.system_prompt.policy}) asks for {' and '.join(tags)} tags, but "
        f"{setting} trains targets without {'them' if len(tags) > 1 else 'it'}: a model trained so learns to "
        "disobey its system prompt. Keep them consistent: data.answer_markup tags (reasoning stripped, tags kept), "
        "data.system_prompt.policy strip or replace, or data.reasoning keep_inline"
    )
