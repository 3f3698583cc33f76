"""Consistency checks that need more than one field: model shape vs mesh, hardware vs devices, paths."""

from __future__ import annotations

import glob
from pathlib import Path

from crosstune import hub
from crosstune.errors import InputError
from crosstune.families import FamilyMismatch, get_family, model_dir_spec
from crosstune.families.spec import EXPERTS_REFUSED, EXPERTS_TARGET, ModelSpec
from crosstune.hardware import HARDWARE
from crosstune.recipe.findings import Problem
from crosstune.recipe.hub_ids import hub_dataset_id, hub_model_id
from crosstune.recipe.paths import UnlocatedRecipeError, recipe_path
from crosstune.recipe.schema import Recipe


def _resolve(base_dir: Path | None, value: str) -> Path | None:
    """A recipe path; None when it is relative and the recipe has no folder (parsed from text alone: nothing on disk
    to check yet)."""
    try:
        return recipe_path(value, base_dir)
    except UnlocatedRecipeError:
        return None


def _id_like(path: str) -> bool:
    """Whether a path that is not there reads like a hub id the user meant (owner/name, no file suffix)."""
    return hub.is_hub_id(path) and not Path(path).suffix


def model_spec(recipe: Recipe, base_dir: Path | None) -> tuple[ModelSpec | None, list[Problem]]:
    """The model's shapes: from the checkpoint's config.json when present, else the named size."""
    family = get_family(recipe.model.family)
    problems: list[Problem] = []
    model_dir = _resolve(base_dir, recipe.model.path) if recipe.model.path else None
    repo, revision = hub_model_id(recipe.model.path), recipe.model.revision
    if repo is not None:  # the cached config only: a check never downloads
        model_dir = hub.cached_model_config(repo, revision)
        if model_dir is None:
            get = hub.fetch_command(repo, "model", revision, hub.MODEL_FILES)
            problems.append(
                Problem(
                    "model.path",
                    f"hub model {repo} is not in the hub cache (yet)",
                    f"fetch it with `{get}`; shape checks use model.size until then",
                    severity="warning",
                )
            )
    elif revision is not None:
        why = f"a hub revision, but model.path {recipe.model.path!r} is a path"
        problems.append(Problem("model.revision", why, "drop model.revision, or write the hub id as hf://OWNER/NAME"))
    if model_dir is not None:
        cfg_file = model_dir / "config.json"
        if cfg_file.is_file():
            try:
                return model_dir_spec(cfg_file.parent, family.name), problems
            except FamilyMismatch as e:
                problems.append(
                    Problem(
                        "model.family",
                        f"{cfg_file} is a {e.found.hf_model_type!r} checkpoint, not {family.name}",
                        "set model.family to match the checkpoint (expects model_type "
                        f"{' or '.join(map(repr, family.hf_model_types))})",
                    )
                )
                return None, problems
            except InputError as e:
                return None, [Problem("model.path", str(e))]
        problems.append(
            Problem(
                "model.path",
                f"no config.json at {cfg_file.parent} (yet)",
                "point it at an HF model directory; shape checks use model.size until it exists"
                + (f" (a hub model is written hf://{recipe.model.path})" if _id_like(recipe.model.path) else ""),
                severity="warning",
            )
        )
    if recipe.model.size:
        if recipe.model.size not in family.sizes:
            problems.append(
                Problem(
                    "model.size",
                    f"unknown {family.name} size {recipe.model.size!r}",
                    f"known: {', '.join(family.sizes)}",
                )
            )
            return None, problems
        return family.spec(recipe.model.size), problems
    return None, problems


def check_recipe(recipe: Recipe, base_dir: Path | None) -> list[Problem]:
    """Every problem of `recipe` that needs more than one field (errors and warnings), in a stable order: the LoRA and
    data settings, the model's shape (`model_spec`) against the targets and the meshes, the hardware, the training
    settings, the data sources. `base_dir`: where its relative paths resolve (None: parsed from text alone)."""
    spec, spec_problems = model_spec(recipe, base_dir)
    return [
        *_settings_problems(recipe),
        *spec_problems,
        *_target_problems(recipe, spec),
        *_shape_problems(recipe, spec),
        *_hardware_problems(recipe),
        *_training_problems(recipe),
        *_source_problems(recipe, base_dir),
    ]


def _settings_problems(recipe: Recipe) -> list[Problem]:
    """The LoRA targets listed once; a reasoning mode the family has; a system prompt its targets agree with."""
    problems: list[Problem] = []
    if len(set(recipe.lora.targets)) != len(recipe.lora.targets):
        problems.append(Problem("lora.targets", "a target is listed twice", "list each of q k v o gate up down once"))

    if recipe.data.reasoning == "native" and not get_family(recipe.model.family).chat.thought_start:
        problems.append(
            Problem(
                "data.reasoning",
                f"{recipe.model.family} has no native reasoning channel",
                "use strip or keep_inline (native is Gemma 4's thought channel)",
            )
        )

    return problems + _prompt_target_problems(recipe)


def _target_problems(recipe: Recipe, spec: ModelSpec | None) -> list[Problem]:
    """The LoRA targets against the model: experts only on a MoE, k and v together, q k v together when fused."""
    problems: list[Problem] = []
    targets = set(recipe.lora.targets)
    if EXPERTS_TARGET in targets:
        problems.append(
            Problem(
                "lora.targets",
                EXPERTS_REFUSED if spec is None or spec.moe is not None else f"{spec.name} has no experts (no MoE)",
                "drop experts: on a MoE model gate, up and down adapt the dense MLP beside the experts",
            )
        )
    if ("k" in targets) != ("v" in targets):
        problems.append(
            Problem(
                "lora.targets",
                "k and v must be targeted together: tunix fuses them into one kv_einsum, whose LoRA (k and v "
                "blocks, each with its own A) the jax backend adapts as one module",
                "list both k and v, or neither",
            )
        )
    family = get_family(recipe.model.family)
    fused = spec is not None and any(family.fuses_qkv(a) for a in spec.attention.values())
    if fused and 0 < len(targets & {"q", "k", "v"}) < 3:
        problems.append(
            Problem(
                "lora.targets",
                "this model has as many KV heads as heads, so tunix fuses q, k and v into one qkv_einsum",
                "list q, k and v together, or none of them",
            )
        )

    return problems


def _shape_problems(recipe: Recipe, spec: ModelSpec | None) -> list[Problem]:
    """The model's heads against the jax mesh's tp and the serving tp; the targets some layers don't have."""
    problems: list[Problem] = []
    if spec is None:
        return problems
    mesh, targets = recipe.backend.jax.mesh, set(recipe.lora.targets)
    tp_issues = spec.tp_problems(mesh.tp)
    if tp_issues and not recipe.backend.jax.replicate_indivisible_heads:
        options = ", ".join(str(t) for t in spec.shardable_tps(max(mesh.tp, 8)))
        problems.append(
            Problem(
                "backend.jax.mesh.tp",
                f"tp={mesh.tp} cannot shard {spec.name}: " + "; ".join(tp_issues),
                f"use tp in {{{options}}}, or set backend.jax.replicate_indivisible_heads: true "
                "(costs memory; see `crosstune plan`)",
            )
        )
    if "v" in recipe.lora.targets and any(a.k_eq_v for a in spec.attention.values()):
        n = sum(1 for i in range(spec.num_layers) if spec.kind(i).k_eq_v)
        problems.append(
            Problem(
                "lora.targets",
                f"{n} k_eq_v layers have no v_proj: the v target adapts only the other layers",
                "values reuse keys there, so the k target covers them",
                severity="warning",
            )
        )
    if targets & {"k", "v"} and spec.kv_shared_layers:
        problems.append(
            Problem(
                "lora.targets",
                f"the last {spec.kv_shared_layers} layers are KV-shared (no k/v projections): k and v adapt only "
                f"the first {spec.first_kv_shared}",
                "those layers attend over the K/V of earlier layers, whose k/v LoRA reaches them",
                severity="warning",
            )
        )
    serve_tp = recipe.serve.tensor_parallel_size
    serve_issues = spec.tp_problems(serve_tp, replicate_kv=True)  # vLLM's rule, as `serve plan` applies it
    if serve_issues:
        options = ", ".join(str(t) for t in spec.shardable_tps(max(serve_tp, 8), replicate_kv=True))
        problems.append(
            Problem(
                "serve.tensor_parallel_size",
                f"vLLM can't split {spec.name} over tensor_parallel_size {serve_tp}: " + "; ".join(serve_issues),
                f"use one of {{{options}}} (`crosstune serve plan` lists the layouts a target allows)",
            )
        )

    return problems


def _hardware_problems(recipe: Recipe) -> list[Problem]:
    """The meshes and the serving tp against the hardware target's devices."""
    problems: list[Problem] = []
    hw, mesh = HARDWARE[recipe.hardware], recipe.backend.jax.mesh  # the schema rejected unknown hardware names
    if hw.chip.platform != "cpu":
        if mesh.fsdp * mesh.tp != hw.devices and (hw.chip.platform == "tpu" or recipe.backend.default == "jax"):
            problems.append(
                Problem(
                    "backend.jax.mesh",
                    f"fsdp × tp = {mesh.fsdp}×{mesh.tp} = {mesh.fsdp * mesh.tp}, "
                    f"but {hw.name} has {hw.devices} devices",
                    f"choose fsdp × tp = {hw.devices}",
                )
            )
        if hw.chip.platform == "gpu" and recipe.backend.torch.devices > hw.devices:
            problems.append(
                Problem(
                    "backend.torch.devices",
                    f"{recipe.backend.torch.devices} devices per node but {hw.name} has {hw.devices} GPUs",
                    f"use at most {hw.devices}",
                )
            )
        if recipe.serve.tensor_parallel_size > hw.devices:
            problems.append(
                Problem(
                    "serve.tensor_parallel_size",
                    f"{recipe.serve.tensor_parallel_size} > {hw.devices} devices of {hw.name}",
                    f"use at most {hw.devices}",
                )
            )
    return problems


def _training_problems(recipe: Recipe) -> list[Problem]:
    """Packing (what the backends' throughput compares), the global batch's split, the precision on CPU."""
    problems: list[Problem] = []
    hw = HARDWARE[recipe.hardware]
    if not recipe.data.packing:
        problems.append(
            Problem(
                "data.packing",
                "unpacked rows are padded to max_seq_len: the jax backend computes every position of every row "
                "(padding included) while the torch backend strips padding, yet both count only real tokens in "
                "tokens/s and mfu, so a jax run is charged for work a torch run never does",
                "set data.packing: true to compare backends (or compare mfu_computed / hfu, which count padding)",
                severity="warning",
            )
        )
    t, tb = recipe.train, recipe.backend.torch
    widths = {"torch (devices × nodes)": tb.devices * tb.nodes, "jax (mesh.fsdp)": recipe.backend.jax.mesh.fsdp}
    for backend, width in widths.items() if t.global_batch_size else ():
        if t.global_batch_size % (t.per_device_batch_size * width):
            problems.append(
                Problem(
                    "train.global_batch_size",
                    f"{t.global_batch_size} rows per step can't be split into micro-batches of per_device_batch_size "
                    f"{t.per_device_batch_size} × {width} data-parallel devices of {backend}",
                    f"use a multiple of {t.per_device_batch_size * width}",
                )
            )
    if hw.chip.platform == "cpu" and recipe.train.precision == "bf16":
        problems.append(
            Problem(
                "train.precision",
                "bf16 on CPU is slow and parity tests need fp32",
                "use fp32 on cpu",
                severity="warning",
            )
        )

    return problems


def _source_problems(recipe: Recipe, base_dir: Path | None) -> list[Problem]:
    """Each data source: a hub dataset in the cache, hub fields only on a hub id, a local path that exists."""
    problems: list[Problem] = []
    for i, src in enumerate(recipe.data.sources):
        if (repo := hub_dataset_id(src)) is not None:
            try:
                hub.resolve(repo, "dataset", src.revision, fetch=False)
            except hub.HubError as e:
                problems.append(Problem(f"data.sources[{i}].path", str(e), severity="warning"))
            continue
        p = _resolve(base_dir, src.path)
        if p is not None and not (p.exists() or glob.glob(str(p))):
            problems.append(
                Problem(
                    f"data.sources[{i}].path",
                    f"nothing at {p} (yet)",
                    "a file, glob or save_to_disk dir"
                    + (f" (a hub dataset is written hf://{src.path})" if _id_like(src.path) else ""),
                    severity="warning",
                )
            )
    return problems


def _prompt_target_problems(recipe: Recipe) -> list[Problem]:
    """A replacement system prompt (its text is in the recipe) that asks for <think>/<answer> tags the targets won't
    have; kept prompts come with the data, so `data prepare` checks those record by record."""
    d = recipe.data
    text = d.system_prompt.text if d.system_prompt.policy == "replace" else None
    asked = [tag for tag in ("<think>", "<answer>") if text and tag in text]
    if not asked or d.reasoning == "keep_inline" or (d.reasoning == "strip" and d.answer_markup == "tags"):
        return []
    return [
        Problem(
            "data.system_prompt.text",
            f"asks for {' and '.join(asked)} tags, but data.reasoning {d.reasoning}"
            + (f" with answer_markup {d.answer_markup}" if d.reasoning == "strip" else "")
            + " trains targets without them: the model learns to disobey its system prompt",
            "set data.answer_markup: tags (reasoning stripped, tags kept), reword the prompt, or use reasoning "
            "keep_inline",
            severity="warning",
        )
    ]
