"""What every export shares: the training sources it can name, LoRA's alpha as the whole number the tools take, and
what it says it can't carry, in the words of the tool it writes for (crosstune's data policies — a rewritten system
prompt or reasoning, dropped over-long examples, a subsample — that the tools' trainers don't have)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crosstune.recipe.data_schema import DataSource
from crosstune.recipe.hub_ids import hub_dataset_id
from crosstune.recipe.load import resolve_path
from crosstune.recipe.porting.port import Unmapped
from crosstune.recipe.schema import Recipe


@dataclass(frozen=True)
class TrainSource:
    """A training source as an export names it: its hub id, or its files' path (one of the two)."""

    key: str  # data.sources[i]
    source: DataSource
    repo: str | None
    path: Path | None


def train_sources(recipe: Recipe, missing: list[Unmapped], tool_eval: str) -> Iterator[TrainSource]:
    """The recipe's training sources; an eval source is listed (`tool_eval`: the tool's nearest setting)."""
    for i, src in enumerate(recipe.data.sources):
        key = f"data.sources[{i}]"
        if src.split != "train":
            missing.append(Unmapped(key, "an eval source: the export trains only", tool_eval))
            continue
        repo = hub_dataset_id(src)
        yield TrainSource(key, src, repo, None if repo is not None else resolve_path(recipe, src.path))


def whole_alpha(recipe: Recipe, tool: str, missing: list[Unmapped]) -> int:
    """lora.alpha as the tools' lora_alpha, a whole number (a fraction rounded, said so)."""
    alpha = recipe.lora.alpha
    if alpha != round(alpha):
        missing.append(
            Unmapped(
                "lora.alpha", f"{tool}'s lora_alpha is a whole number, {alpha:g} is not", f"lora_alpha {round(alpha)}"
            )
        )
    return round(alpha)


def data_not_carried(recipe: Recipe, tool: str, *, cuts: str | None, subsample: str) -> list[Unmapped]:
    """The data policies `tool` trains without. `cuts`: how the tool shortens an over-long example (None: it can drop
    one too); `subsample`: its nearest to crosstune's subsample."""
    d = recipe.data
    out = []
    if d.system_prompt.policy != "keep":
        out.append(
            Unmapped(
                "data.system_prompt",
                f"policy {d.system_prompt.policy}: {tool} trains the data's system prompt as written",
                "rewrite the data",
            )
        )
    if d.reasoning != "keep_inline":
        out.append(
            Unmapped(
                "data.reasoning",
                f"{d.reasoning}: crosstune rewrites the reasoning in assistant text "
                f"(<think> blocks, <answer> tags); {tool} trains the text as written",
                "data without reasoning markup, or data.reasoning keep_inline",
            )
        )
    if d.truncation == "drop" and cuts is not None:
        out.append(
            Unmapped("data.truncation", f"drop: {tool} {cuts} instead of dropping it", "data.truncation truncate")
        )
    if d.subsample is not None:
        out.append(Unmapped("data.subsample", f"{tool} reads every record of the split", subsample))
    return out


def kernels_not_carried(recipe: Recipe, tool: str, defaults: str) -> list[Unmapped]:
    """crosstune's switches around TRL's trainer that `tool`'s config can't set."""
    k = recipe.train.kernels
    if k.recompute == "selective" or not k.lora_input_cast or (not k.token_metrics and k.loss != "cce"):
        return [
            Unmapped(
                "train.kernels",
                "recompute selective, lora_input_cast and token_metrics are crosstune's "
                f"switches around TRL's trainer; {tool} has none",
                defaults,
            )
        ]
    return []
