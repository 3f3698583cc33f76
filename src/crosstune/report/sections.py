"""The report's sections about runs: what differs between them, their training curves, speed and cost."""

from __future__ import annotations

import json
from pathlib import Path

from crosstune.cost.costs import TrainingCost, training_cost
from crosstune.cost.prices import PriceBook
from crosstune.errors import InputError
from crosstune.report import plots
from crosstune.report.comparability import compare_runs, prepared_manifest
from crosstune.report.document import Chart, Document, Note, Table
from crosstune.run.records import LOSS_CONVENTION
from crosstune.run.run_summary import RunSummary


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _lora_layout(run: RunSummary) -> str:
    layout = run.record.lora.layout
    return f"{layout.modules} modules, {json.dumps(layout.targets_by_layer_type)}"


def _compile(run: RunSummary) -> str:
    if run.compile_time_s is None:
        return "n/a"
    return f"{run.compile_time_s:,.1f} ({run.record.compile_time_measure})"


def run_attributes(run: RunSummary) -> dict[str, str]:
    """What can differ between two runs, from run.json (its typed record) and recipe.yaml."""
    record, recipe = run.record, run.recipe
    lora = record.lora
    attrs = {
        "backend": run.backend,
        "hardware": run.hardware,
        "devices": str(record.devices),
        "mesh (fsdp × tp)": f"{record.mesh.fsdp} × {record.mesh.tp}",
        "platform": record.platform,
        "model": f"{record.family} {recipe.model.size if recipe else ''}".strip(),
        "precision": record.precision,
        "packing": str(recipe.data.packing) if recipe else "n/a",
        "max_seq_len": str(recipe.data.max_seq_len) if recipe else "n/a",
        "global batch (rows)": str(record.global_batch),
        "gradient accumulation": str(record.grad_accumulation),
        "gradient checkpointing": str(record.gradient_checkpointing),
        "LoRA r / alpha / dropout": f"{lora.rank} / {lora.alpha:g} / {lora.dropout:g}",
        "LoRA targets": ",".join(lora.targets),
        "LoRA layout": _lora_layout(run),
        "loss convention": run.loss_convention,
        "steps": str(run.steps),
    }
    for name, version in sorted(record.versions.items()):
        attrs[f"version: {name}"] = version
    return attrs


def differences_section(doc: Document, runs: list[RunSummary]) -> list[Note]:
    section = doc.section("Are the runs comparable?")
    notes = compare_runs(runs)
    section.items += notes or [Note("Same data hash, chat-template hash and loss convention across the runs.")]
    attrs = [run_attributes(r) for r in runs]
    keys = list(dict.fromkeys(k for a in attrs for k in a))
    rows, differing = [], []
    for key in keys:
        values = [a.get(key, "—") for a in attrs]
        if key.startswith("version: ") and len(set(values)) == 1:
            continue  # identical versions are listed once below, not row by row
        rows.append([key, *values])
        if len(set(values)) > 1:
            differing.append(key)
    fatal = {i for i, row in enumerate(rows) if row[0] == "loss convention" and len(set(row[1:])) > 1}
    same_versions = [k.removeprefix("version: ") for k in keys if k.startswith("version: ") and k not in differing]
    caption = "Differs: " + (", ".join(differing) if differing else "nothing") + "."
    if same_versions:
        caption += f" Same versions of: {', '.join(same_versions)}."
    section.items.append(Table("What each run was", ["", *[r.label for r in runs]], rows, fatal, caption))
    return notes


def training_section(doc: Document, runs: list[RunSummary], notes: list[Note]) -> None:
    section = doc.section("Training")
    conventions = {r.loss_convention for r in runs}
    comparable = len(conventions) == 1 and not any(n.level == "error" for n in notes)
    if len(conventions) == 1:
        statement = f"loss: {next(iter(conventions))} — the same definition on every run plotted"
        if not comparable:
            statement += "\nNOT COMPARABLE: the runs differ in data or chat template (see above)"
    else:
        statement = "NOT COMPARABLE: loss conventions differ — " + "; ".join(sorted(conventions))
    section.items.append(
        Chart("loss", "Training loss", plots.loss_curves(runs, statement, comparable), "loss curves of all runs")
    )
    section.items.append(Chart("throughput", "Throughput and MFU", plots.throughput(runs), "tokens/s and MFU"))
    rows = []
    for r in runs:
        rows.append(
            [
                r.label,
                str(r.steps),
                num(r.step_time_s, 1),
                _compile(r),
                num(r.checkpoint_time_s, 1),
                f"{r.trained_tokens:,}",
                num(r.trained_tokens_per_s, 1),
                num(r.tokens_per_s, 1),
                "n/a" if r.mean_mfu is None else f"{100 * r.mean_mfu:.2f} %",
                num(r.final_loss, 4),
            ]
        )
    headers = [
        "run",
        "steps",
        "step time (s)",
        "compile (s)",
        "checkpoint saves (s)",
        "trained tokens",
        "trained tok/s",
        "tok/s",
        "mean MFU",
        "final loss",
    ]
    caption = (
        f"Loss: {LOSS_CONVENTION}. MFU as both trainers record it: LoRA model FLOPs of the real tokens (forward + "
        "backward-to-activations, 4N; recomputed activations not counted — metrics.jsonl's hfu counts them) over "
        "the hardware's bf16 peak; n/a on CPU. Compile: kept out of the step times, measured as named (xla: the jax "
        "train step's compilation; torch.compile: dynamo + inductor; first-step warm-up: torch's first step over the "
        "next steps' mean). n/a timing: the run did not record it (a one-step torch run's warm-up)."
    )
    section.items.append(Table("Per run", headers, rows, caption=caption))
    for r in runs:
        section.items += [Note(f"{r.label}: {n}", "warn") for n in r.notes]
    shown: set[Path] = set()
    for r in runs:
        found = _lengths_png(r)
        if found is not None and found not in shown:  # runs on the same prepared data share one histogram
            shown.add(found)
            section.items.append(
                Chart(
                    f"lengths-{_slug(r.path.name)}",
                    f"Token lengths of the prepared data ({found.parent.name}; `crosstune data stats`)",
                    found.read_bytes(),
                    "token length histogram of the prepared data",
                )
            )


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def _lengths_png(run: RunSummary) -> Path | None:
    """The prepared data's histogram (`data stats` writes lengths.png next to manifest.json), when found."""
    manifest = prepared_manifest(run)
    path = Path(manifest["_path"]).with_name("lengths.png") if manifest.get("_path") else None
    return path.resolve() if path is not None and path.is_file() else None


def training_cost_section(doc: Document, runs: list[RunSummary], book: PriceBook) -> list[TrainingCost | None]:
    section = doc.section("Training cost")
    costs: list[TrainingCost | None] = []
    rows = []
    for r in runs:
        try:
            c = training_cost(r, book)
        except InputError as e:
            costs.append(None)
            rows.append([r.label, r.hardware, "n/a", num(r.step_time_s / 3600, 3), "n/a", "n/a", "n/a", "n/a"])
            section.items.append(Note(f"{r.label}: {e}", "warn"))
            continue
        costs.append(c)
        rows.append(
            [
                c.label,
                r.hardware,
                f"{usd(c.price.per_hour)}/h",
                num(c.step_hours, 3),
                usd(c.step_cost),
                usd(c.wall_cost),
                usd(c.usd_per_m_trained),
                usd(c.usd_per_m_trained_wall),
            ]
        )
    headers = [
        "run",
        "hardware",
        "price",
        "hours (steps)",
        "cost (steps)",
        "cost (+ compile, checkpoints)",
        "$ / 1M trained tokens",
        "$ / 1M trained tokens (+ compile, checkpoints)",
    ]
    section.items.append(
        Table(
            "Training cost", headers, rows, caption="n/a with compile/checkpoints: the run did not record those times."
        )
    )
    return costs
