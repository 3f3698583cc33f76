"""A TCO workload file: how much serving, for how long, and the options to price (measured or assumed).

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.cost.tco_workload"."""

from __future__ import annotations

from pathlib import Path

from crosstune.bounds import number, whole
from crosstune.cost.costs import (
    ServingCost,
    TrainingCost,
    serving_costs,
    tokens_per_s_at_mfu,
    training_cost,
    what_if_serving,
    what_if_training,
)
from crosstune.cost.prices import CostError, PriceBook
from crosstune.cost.served_run import declared_run, sweep_serves
from crosstune.cost.tco import Option, Workload
from crosstune.run.run_summary import read_run
from crosstune.servebench.slo import check_slo
from crosstune.servebench.summary_cells import read_sweep
from crosstune.untrusted_files import read_yaml


def load_workload(path: Path, book: PriceBook, **overrides: float | None) -> tuple[Workload, list[Option]]:
    """Parse a workload file; `overrides` (days, serve_tokens_per_day, serve_hours_per_day) replace its values."""
    path = Path(path)
    try:
        raw = read_yaml(path) or {}
    except OSError as e:
        raise CostError(f"{path}: can't read the workload: {e.strerror or e}") from None
    if not isinstance(raw, dict):
        raise CostError(f"{path}: expected a mapping (days, serve_tokens_per_day, options, ...)")
    unknown = set(raw) - WORKLOAD_KEYS
    if unknown:
        raise CostError(
            f"{path}: unknown key(s) {', '.join(map(repr, sorted(unknown)))}; known: {sorted(WORKLOAD_KEYS)}"
        )
    given = {k: v for k, v in overrides.items() if v is not None}
    fields = {k: raw.get(k) for k in ("days", "serve_tokens_per_day", "serve_hours_per_day")}
    if {"serve_tokens_per_day", "serve_hours_per_day"} & set(given):
        fields.update(serve_tokens_per_day=None, serve_hours_per_day=None)  # a command-line volume replaces the file's
    if fields["days"] is None and "days" not in given:
        raise CostError(f"{path}: `days` is required (how long the model is served)")
    fields |= given
    workload = Workload.given(str(path), fields["days"], fields["serve_tokens_per_day"], fields["serve_hours_per_day"])
    options = raw.get("options")
    if not isinstance(options, dict) or not options:
        raise CostError(f"{path}: `options` must map option names to {{train: ..., serve: ...}}")
    slo = check_slo(raw.get("slo") or {}, f"{path}: slo")
    context = None if raw.get("context") is None else whole(f"{path}: context", raw["context"], low=1, unit="tokens")
    built = []
    for name, spec in options.items():
        where = f"{path}: options.{name}"
        if not isinstance(spec, dict) or set(spec) != {"train", "serve"}:
            raise CostError(f"{where}: needs exactly `train` and `serve`")
        train = train_cost_from_spec(where + ".train", path.parent, spec["train"], book)
        serve = serve_cost_from_spec(where + ".serve", path.parent, spec["serve"], book, context, slo)
        check_pairing(where, train, serve)
        built.append(Option(str(name), train, serve))
    return workload, built


WORKLOAD_KEYS = {"days", "serve_tokens_per_day", "serve_hours_per_day", "context", "slo", "options"}
TRAIN_KEYS = {"run", "target", "tokens", "hours", "tokens_per_s", "mfu", "model", "seq_len", "recompute"}
SERVE_KEYS = {"bench", "target", "output_tokens_per_s"}


def _spec(where: str, spec: object, known: set[str]) -> dict:
    if not isinstance(spec, dict):
        raise CostError(f"{where}: expected a mapping")
    unknown = set(spec) - known
    if unknown:
        raise CostError(f"{where}: unknown key(s) {', '.join(map(repr, sorted(unknown)))}; known: {sorted(known)}")
    for key in ("run", "bench", "target", "model"):
        if key in spec and not isinstance(spec[key], str):
            raise CostError(f"{where}.{key}: {spec[key]!r} is not text")
    if "recompute" in spec and not isinstance(spec["recompute"], bool):
        raise CostError(f"{where}.recompute: {spec['recompute']!r} is not true or false")
    return spec


def train_cost_from_spec(where: str, base: Path, spec: object, book: PriceBook) -> TrainingCost:
    spec = _spec(where, spec, TRAIN_KEYS)
    if "run" in spec:
        return training_cost(read_run(base / spec["run"]), book, spec.get("target"))
    target, tokens = spec.get("target"), spec.get("tokens")
    if target is None or tokens is None:
        raise CostError(f"{where}: a what-if needs `target` and `tokens` (or give `run: <run dir>`)")
    tokens = number(f"{where}.tokens", tokens, low=0, low_open=True, unit="trained tokens")
    positive = {"low": 0, "low_open": True}
    if "hours" in spec:
        hours = number(f"{where}.hours", spec["hours"], **positive, unit="hours")
        return what_if_training(book, target, trained_tokens=tokens, hours=hours)
    if "tokens_per_s" in spec:
        rate = number(f"{where}.tokens_per_s", spec["tokens_per_s"], **positive, unit="trained tokens/s")
        return what_if_training(book, target, trained_tokens=tokens, tokens_per_s=rate)
    if "mfu" in spec:
        from crosstune.families import get_family

        family, _, size = str(spec.get("model", "")).partition("/")
        if not size or "seq_len" not in spec:
            raise CostError(f"{where}: an MFU what-if needs `model: <family>/<size>` and `seq_len`")
        mfu = number(f"{where}.mfu", spec["mfu"], **positive, high=1, unit="a fraction of the bf16 peak")
        seq_len = whole(f"{where}.seq_len", spec["seq_len"], low=1, unit="tokens")
        try:
            model = get_family(family).spec(size)
        except KeyError as e:
            raise CostError(f"{where}.model: {e.args[0]}") from None
        recompute = spec.get("recompute", False)
        flops = model.lora_train_flops_per_token(seq_len, recompute)
        rate = tokens_per_s_at_mfu(target, mfu, flops)
        made = [
            f"MFU {mfu:.0%} of {target}'s bf16 peak, {family} {size} at {seq_len} tokens, "
            f"LoRA {'6N FLOPs (recompute counted: a hardware-FLOPs utilisation)' if recompute else '4N FLOPs'}"
        ]
        return what_if_training(book, target, trained_tokens=tokens, tokens_per_s=rate, assumptions=made)
    raise CostError(f"{where}: give `run`, or `target` + `tokens` with one of hours, tokens_per_s, mfu")


def serve_cost_from_spec(
    where: str, base: Path, spec: object, book: PriceBook, context: int | None, slo: dict
) -> ServingCost:
    spec = _spec(where, spec, SERVE_KEYS)
    if "bench" in spec:
        sweep = read_sweep(base / spec["bench"])
        costs = serving_costs(sweep, book, spec.get("target"), slo or None)
        at = context if context is not None else max(sweep.contexts)
        found = next((c for c in costs if c.context_len == at), None)
        if found is None:
            raise CostError(f"{where}: {sweep.path} has no context {at}; it measured {sweep.contexts}")
        return found
    if "target" in spec and "output_tokens_per_s" in spec:
        rate = number(f"{where}.output_tokens_per_s", spec["output_tokens_per_s"], low=0, low_open=True)
        return what_if_serving(book, spec["target"], context or 0, rate)
    raise CostError(f"{where}: give `bench: <summary.json>` or `target` + `output_tokens_per_s`")


def check_pairing(where: str, train: TrainingCost, serve: ServingCost) -> None:
    """A workload option whose sweep declares it served another run than the option trains is refused."""
    if train.run is not None and sweep_serves(serve.source, train.run) is False:
        raise CostError(
            f"{where}: serve.bench declares it served {declared_run(serve.source)}, but train is {train.run.path}: "
            "give each option the sweep of its own run"
        )
