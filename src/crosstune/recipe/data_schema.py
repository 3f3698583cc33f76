"""The recipe's `data` section: sources (files, globs, save_to_disk folders, hub datasets), the column mapping, the
system-prompt and reasoning policies, length, packing and subsampling (crosstune.data reads them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from crosstune import hub
from crosstune.recipe.section import Section, bounded


def hub_checked(value: str | None, check) -> str | None:
    """`value` through crosstune.hub's `check` (hub_id, check_revision), its HubError a ValueError for pydantic."""
    try:
        check(value)
    except hub.HubError as e:
        raise ValueError(str(e)) from None
    return value


class DataSource(Section):
    omitted_when_none = ("config", "hub_split", "revision")
    path: str = Field(description="a file, a glob, a save_to_disk directory, or a hub dataset: hf://OWNER/NAME")
    format: Literal["auto", "jsonl", "parquet", "hf_disk", "hub"] = Field(
        "auto",
        description="auto: by suffix or folder, and hub for a path written hf://OWNER/NAME (a hub dataset, "
        "read with `datasets` from the hub cache)",
    )
    split: Literal["train", "eval"] = Field("train", description="what crosstune uses the records for")
    config: str | None = Field(None, description="hub datasets: the configuration (subset) to read")
    hub_split: str | None = Field(
        None,
        description="hub datasets: the split to read, in `datasets`' slicing syntax (train, train[:10%]); "
        "default train",
    )
    revision: str | None = Field(None, description="hub datasets: a branch, tag or commit")

    _path = field_validator("path")(lambda cls, v: hub_checked(v, hub.hub_id))
    _revision = field_validator("revision")(lambda cls, v: hub_checked(v, hub.check_revision))

    @property
    def names_hub_fields(self) -> bool:
        return any(v is not None for v in (self.config, self.hub_split, self.revision))

    @model_validator(mode="after")
    def _hub_fields_for_hub_sources(self) -> DataSource:
        on_hub = hub.hub_id(self.path) is not None
        if self.names_hub_fields and not on_hub:
            fix = "drop them, or write the hub dataset as hf://OWNER/NAME"
            raise ValueError(
                f"config, hub_split and revision select from a hub dataset, and {self.path!r} is a path: {fix}"
            )
        if on_hub and self.format not in ("auto", "hub"):
            raise ValueError(f"format {self.format!r} reads a local file, and {self.path!r} is a hub dataset")
        if self.format == "hub" and not on_hub:
            raise ValueError(f"format hub reads a hub dataset: write it as hf://OWNER/NAME, not {self.path!r}")
        return self


class ColumnMapping(Section):
    omitted_when_none = ("message_role", "message_content")
    preset: Literal["codev_r1", "qa", "messages", "prompt_completion", "custom"] = Field(
        "codev_r1",
        description="messages: a list of {role, content} (ShareGPT's human/gpt roles read as user/"
        "assistant); prompt_completion: TRL's columns, each a string or a list of messages",
    )
    system: str | None = None
    prompt: str | None = None
    response: str | None = None
    messages: str | None = None
    message_role: str | None = Field(None, description="the message key holding the role (default role)")
    message_content: str | None = Field(None, description="the message key holding the text (default content)")

    def resolved(self) -> dict[str, str | None]:
        """Column names after applying the preset (explicit names win)."""
        base = {
            "codev_r1": {"system": "system", "prompt": "prompt", "response": "response", "messages": None},
            "qa": {"system": None, "prompt": "question", "response": "answer", "messages": None},
            "messages": {"system": None, "prompt": None, "response": None, "messages": "messages"},
            "prompt_completion": {"system": None, "prompt": "prompt", "response": "completion", "messages": None},
            "custom": {"system": None, "prompt": None, "response": None, "messages": None},
        }[self.preset]
        return {k: getattr(self, k) or v for k, v in base.items()}

    @property
    def message_keys(self) -> tuple[str, str]:
        """(role key, content key) of each message."""
        return self.message_role or "role", self.message_content or "content"


class SystemPromptPolicy(Section):
    policy: Literal["keep", "strip", "replace"] = "keep"
    text: str | None = None

    @model_validator(mode="after")
    def _text_for_replace(self) -> SystemPromptPolicy:
        if self.policy == "replace" and not self.text:
            raise ValueError("system_prompt.policy 'replace' needs system_prompt.text")
        return self


class Subsample(Section):
    size: int = bounded("data.subsample.size")
    seed: int = bounded("data.subsample.seed", 42)


class DataSection(Section):
    sources: list[DataSource] = Field(min_length=1)
    columns: ColumnMapping = Field(default_factory=ColumnMapping)
    system_prompt: SystemPromptPolicy = Field(default_factory=SystemPromptPolicy)
    reasoning: Literal["strip", "keep_inline", "native"] = "strip"
    answer_markup: Literal["plain", "tags"] = Field(
        "plain",
        description="reasoning strip only: 'tags' trains the answer in the markup a CodeV-R1 system prompt "
        "asks for, an emptied <think></think> then <answer>ANSWER</answer>, so a kept prompt and the target agree",
    )
    max_seq_len: int = bounded("data.max_seq_len", 2048)
    truncation: Literal["drop", "truncate"] = "drop"
    packing: bool = True
    subsample: Subsample | None = None
    strict: bool = Field(True, description="stop at the first bad record (file:line) instead of skipping it")
    prepared_dir: str | None = Field(None, description="where prepared shards go (default: <output_dir>/data/<name>)")

    @model_validator(mode="after")
    def _markup_needs_strip(self) -> DataSection:
        if self.answer_markup == "tags" and self.reasoning != "strip":
            raise ValueError(
                f"answer_markup 'tags' rewrites stripped targets; reasoning {self.reasoning!r} keeps the reasoning "
                "(keep_inline: the record's own tags; native: Gemma 4's thought channel): set answer_markup plain"
            )
        return self
