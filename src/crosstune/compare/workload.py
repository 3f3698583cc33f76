"""A TCO workload file: how much serving, for how long, and the options to price (measured or assumed).

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.compare.workload"."""

from __future__ import annotations

from pathlib import Path

import yaml

from crosstune.compare.cost import (
    ServingCost,
    TrainingCost,
    serving_costs,
    tokens_per_s_at_mfu,
    training_cost,
    what_if_serving,
    what_if_training,
)
from crosstune.compare.prices import CostError, PriceBook
from crosstune.compare.runs import read_run
from crosstune.compare.sweeps import read_sweep
from crosstune.compare.tco import Option, Workload


def load_workload(path: Path, book: PriceBook, **overrides: float | None) -> tuple[Workload, list[Option]]:
    """Parse a workload file; `overrides` (days, serve_tokens_per_day, serve_hours_per_day) replace its values."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CostError(f"{path}: can't read the workload: {e}") from None
    if not isinstance(raw, dict):
        raise CostError(f"{path}: expected a mapping (days, serve_tokens_per_day, options, ...)")
    given = {k: v for k, v in overrides.items() if v is not None}
    fields = {k: raw.get(k) for k in ("days", "serve_tokens_per_day", "serve_hours_per_day")}
    if {"serve_tokens_per_day", "serve_hours_per_day"} & set(given):
        fields.update(serve_tokens_per_day=None, serve_hours_per_day=None)  # a command-line volume replaces the file's
    fields |= given
    if fields["days"] is None:
        raise CostError(f"{path}: `days` is required (how long the model is served)")
    workload = Workload(**{k: None if v is None else float(v) for k, v in fields.items()})
    options = raw.get("options")
    if not isinstance(options, dict) or not options:
        raise CostError(f"{path}: `options` must map option names to {{train: ..., serve: ...}}")
    slo = {k: float(v) for k, v in (raw.get("slo") or {}).items()}
    built = []
    for name, spec in options.items():
        where = f"{path}: options.{name}"
        if not isinstance(spec, dict) or set(spec) != {"train", "serve"}:
            raise CostError(f"{where}: needs exactly `train` and `serve`")
        train = train_cost_from_spec(where + ".train", path.parent, spec["train"], book)
        serve = serve_cost_from_spec(where + ".serve", path.parent, spec["serve"], book, raw.get("context"), slo)
        built.append(Option(str(name), train, serve))
    return workload, built


def train_cost_from_spec(where: str, base: Path, spec: dict, book: PriceBook) -> TrainingCost:
    if not isinstance(spec, dict):
        raise CostError(f"{where}: expected a mapping")
    if "run" in spec:
        return training_cost(read_run(base / spec["run"]), book, spec.get("target"))
    target, tokens = spec.get("target"), spec.get("tokens")
    if target is None or tokens is None:
        raise CostError(f"{where}: a what-if needs `target` and `tokens` (or give `run: <run dir>`)")
    if "hours" in spec:
        return what_if_training(book, target, trained_tokens=float(tokens), hours=float(spec["hours"]))
    if "tokens_per_s" in spec:
        return what_if_training(book, target, trained_tokens=float(tokens), tokens_per_s=float(spec["tokens_per_s"]))
    if "mfu" in spec:
        from crosstune.families import get_family

        family, _, size = str(spec.get("model", "")).partition("/")
        if not size or "seq_len" not in spec:
            raise CostError(f"{where}: an MFU what-if needs `model: <family>/<size>` and `seq_len`")
        model = get_family(family).spec(size)
        recompute = bool(spec.get("recompute", False))
        flops = model.lora_train_flops_per_token(int(spec["seq_len"]), recompute)
        rate = tokens_per_s_at_mfu(target, float(spec["mfu"]), flops)
        made = [
            f"MFU {float(spec['mfu']):.0%} of {target}'s bf16 peak, {family} {size} at {spec['seq_len']} tokens, "
            f"LoRA {'6N FLOPs (recompute counted: a hardware-FLOPs utilisation)' if recompute else '4N FLOPs'}"
        ]
        return what_if_training(book, target, trained_tokens=float(tokens), tokens_per_s=rate, assumptions=made)
    raise CostError(f"{where}: give `run`, or `target` + `tokens` with one of hours, tokens_per_s, mfu")


def serve_cost_from_spec(
    where: str, base: Path, spec: dict, book: PriceBook, context: int | None, slo: dict
) -> ServingCost:
    if not isinstance(spec, dict):
        raise CostError(f"{where}: expected a mapping")
    if "bench" in spec:
        sweep = read_sweep(base / spec["bench"])
        costs = serving_costs(sweep, book, spec.get("target"), slo or None)
        at = int(context) if context is not None else max(sweep.contexts)
        found = next((c for c in costs if c.context_len == at), None)
        if found is None:
            raise CostError(f"{where}: {sweep.path} has no context {at}; it has {sweep.contexts}")
        return found
    if "target" in spec and "output_tokens_per_s" in spec:
        return what_if_serving(book, spec["target"], int(context or 0), float(spec["output_tokens_per_s"]))
    raise CostError(f"{where}: give `bench: <summary.json>` or `target` + `output_tokens_per_s`")
