"""`recipe import --from axolotl`: an Axolotl YAML as a crosstune recipe, through Axolotl's key table
(crosstune.recipe.porting.axolotl_keys): every key mapped, listed as not mapped (why, and the nearest crosstune
setting) or as ignored (logging and the like); a key the file leaves out counts at Axolotl's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families import get_family
from crosstune.families.spec import EXPERTS_REFUSED
from crosstune.recipe.porting.axolotl_keys import (
    ATTENTION_SWITCHES,
    CCE_PLUGIN,
    KERNELS,
    LIGER,
    MULTIMODAL,
    OTHER_ATTENTION,
)
from crosstune.recipe.porting.named_data import TEXT_ONLY, data_path
from crosstune.recipe.porting.named_model import identify_model, qlora_line, resolve_targets, set_alpha, set_model
from crosstune.recipe.porting.port import ImportRefused, Keys, Port
from crosstune.recipe.porting.target import Batch, ImportOptions, deepspeed_devices, set_batch, set_hardware
from crosstune.recipe.porting.training import (
    set_adamw,
    set_every,
    set_fsdp_recompute,
    set_held_out,
    set_length,
    set_schedule,
)
from crosstune.recipe.training_arguments import attention_of

KNOWN_TEMPLATES = {"gemma3": ("tokenizer_default", "gemma3", "gemma"), "gemma4": ("tokenizer_default", "gemma4")}
AXOLOTL_MIN_WARMUP = 2  # Axolotl turns a warm-up of one step into two


def import_axolotl(take: Keys, source: Path, options: ImportOptions) -> Port:
    """The recipe an Axolotl config describes (Port.recipe) and what did not carry over."""
    port = Port(source, "axolotl")
    name = take("base_model")
    if name is None:
        raise ImportRefused(f"{source}: base_model is missing: name the model (a hub id or a folder)")
    model = identify_model(name, take("revision_of_model"), source.parent, "base_model")
    set_model(port, model)
    port.set("model.dtype", "bfloat16")
    adapter = take("adapter")
    if adapter not in ("lora", "qlora"):
        what = "a full fine-tune (no adapter)" if adapter is None else f"adapter {adapter!r}"
        raise ImportRefused(f"{source}: {what}: crosstune trains LoRA; set adapter: lora")
    if take("load_in_4bit") or adapter == "qlora":
        qlora_line(port, "adapter: qlora" if adapter == "qlora" else "load_in_4bit", model)
    if take("load_in_8bit"):
        port.miss("load_in_8bit", "an 8-bit base (bitsandbytes LLM.int8)", "LoRA on a bf16 base")
    take.direct(port)
    _lora(port, take, model)
    _media(port, take)
    _data(port, take, source, model.family)
    set_hardware(port, options.hardware, model)
    _training(port, take)
    set_batch(
        port,
        Batch(
            take("micro_batch_size"),
            "micro_batch_size",
            take("gradient_accumulation_steps"),
            "gradient_accumulation_steps",
            *_devices(take, source.parent),
        ),
        options,
    )
    _kernels(port, take)
    take.rest(port)
    return port


def _devices(take: Keys, config_dir: Path) -> tuple[int | None, str]:
    """The GPUs an Axolotl config trains on, where it says: its data-parallel sizes (dp_shard_size: FSDP's shards,
    dp_replicate_size: its replicas), else its DeepSpeed config's batch arithmetic."""
    shard, replicate = take("dp_shard_size"), take("dp_replicate_size")
    if shard is not None or replicate is not None:
        named = " × ".join(f"{k} {v}" for k, v in (("dp_shard_size", shard), ("dp_replicate_size", replicate)) if v)
        return (shard or 1) * (replicate or 1), f"{named} in the config"
    if take("deepspeed") is not None:
        return deepspeed_devices(take("deepspeed"), config_dir, "deepspeed")
    return None, ""


def _lora(port: Port, take: Keys, model) -> None:
    if not take.has("lora_r"):
        port.notes.append("lora.rank 8: no lora_r, so PEFT's default")
    rank = take("lora_r")
    alpha = take("lora_alpha") if take("lora_alpha") is not None else rank
    set_alpha(port, alpha, rank, "peft_use_rslora" if take("peft_use_rslora") else None)
    if take("lora_target_linear"):
        resolve_targets(port, "lora_target_linear", "all-linear", model)
        take("lora_target_modules")
    elif take("lora_target_modules") is not None:
        resolve_targets(port, "lora_target_modules", take("lora_target_modules"), model)
    else:
        port.notes.append("lora_target_modules: none given, so PEFT's Gemma default q_proj, v_proj")
        resolve_targets(port, "lora_target_modules", ["q_proj", "v_proj"], model)
    if take("lora_target_parameters"):
        port.miss("lora_target_parameters", EXPERTS_REFUSED, "lora.targets gate, up, down (the dense MLP)")
    for key, why in (
        ("peft_use_dora", "DoRA's magnitude vector"),
        ("lora_modules_to_save", "whole modules trained"),
        ("lora_model_dir", "starting from a saved adapter"),
        ("loraplus_lr_ratio", "LoRA+'s B rate"),
    ):
        if take(key):
            port.miss(key, f"{why}: crosstune trains plain LoRA from its own initial draw", "lora")


def _media(port: Port, take: Keys) -> None:
    """A vision or audio config: said up front (and --strict refuses it) rather than failing at `data prepare`."""
    for key in MULTIMODAL:
        if take(key):
            port.miss(key, f"a vision or audio setting: {TEXT_ONLY}", "a text-only config of the same model")


def _data(port: Port, take: Keys, source: Path, family: str) -> None:
    entries = take("datasets")
    if not isinstance(entries, list) or not entries:
        raise ImportRefused(f"{source}: no datasets: name the training data (type: chat_template)")
    sources, columns = [], None
    for i, entry in enumerate(entries):
        found = _dataset(port, f"datasets[{i}]", entry, source.parent)
        if found is None:
            continue
        src, cols = found
        if columns not in (None, cols):
            port.miss(
                f"datasets[{i}]",
                f"columns {cols} differ from datasets[0]'s {columns}: one mapping reads every source",
                "a copy of the data in the first source's columns",
            )
            continue
        sources.append(src)
        columns = cols
    if not sources:
        raise ImportRefused(f"{source}: no dataset crosstune can read: it reads conversations (type chat_template)")
    port.set("data.sources", sources)
    port.set("data.columns", columns)
    port.set("data.reasoning", "keep_inline")  # Axolotl trains the text as written
    template = take("chat_template")
    if template not in KNOWN_TEMPLATES[family] or take("chat_template_jinja"):
        port.miss(
            "chat_template",
            f"{take('chat_template_jinja') and 'jinja' or template}: crosstune renders with the "
            "model's own template (what is trained is what is served)",
            f"the {family} template",
        )
    eot = take("eot_tokens")
    turn_end = get_family(family).chat.turn_end
    if eot is not None and list(eot) != [turn_end]:
        port.miss("eot_tokens", f"{eot}: crosstune trains each answer through {turn_end}", f"{turn_end}")
    if take("special_tokens") or take("tokens") or take("added_tokens_overrides"):
        for key in ("special_tokens", "tokens", "added_tokens_overrides"):
            if take(key):
                port.miss(key, "tokens added or renamed: crosstune trains the checkpoint's vocabulary", "")
    strategy = take("excess_length_strategy")
    port.set("data.truncation", "truncate" if strategy == "truncate" else "drop")
    if strategy not in ("drop", "truncate"):
        port.miss("excess_length_strategy", f"{strategy}: crosstune drops or truncates", "data.truncation drop")
    if take("train_on_inputs"):
        port.miss("train_on_inputs", "true: Axolotl trains the prompts too", "crosstune's assistant-only loss")


def _dataset(port: Port, key: str, entry: Any, config_dir: Path) -> tuple[dict, dict] | None:
    """One `datasets` entry as a source and its column mapping (None: listed as not mapped)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ImportRefused(f"{key}: a dataset entry needs a path")
    entry = {k: v for k, v in entry.items() if v is not None}
    kind = entry.pop("type", None)
    if kind != "chat_template":
        port.miss(f"{key}.type", f"{kind}: crosstune reads conversations (type chat_template)", "data.columns")
        return None
    files = entry.pop("data_files", None)
    path, is_hub = data_path(key, files if isinstance(files, str) else entry["path"], config_dir)
    entry.pop("path")
    src: dict[str, Any] = {"path": path}
    if entry.get("ds_type") in ("json", "parquet") and not is_hub:
        fmt = {"json": "jsonl", "parquet": "parquet"}[entry.pop("ds_type")]
        if {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(Path(path).suffix) != fmt:
            src["format"] = fmt  # the suffix doesn't say it
    for theirs, ours in (("name", "config"), ("revision", "revision")):
        if theirs in entry:
            src[ours] = entry.pop(theirs)
    split = entry.pop("split", "train")
    if is_hub and split != "train":
        src["hub_split"] = split
    mapping = entry.pop("message_property_mappings", {}) or {}
    role = mapping.get("role", entry.pop("message_field_role", "role"))
    content = mapping.get("content", entry.pop("message_field_content", "content"))
    field = entry.pop("field_messages", "messages")
    columns = {"preset": "messages", **({"messages": field} if field != "messages" else {})}
    columns.update({"message_role": role} if role != "role" else {})
    columns.update({"message_content": content} if content != "content" else {})
    if set(mapping) - {"role", "content"}:
        port.miss(
            f"{key}.message_property_mappings",
            f"{sorted(set(mapping) - {'role', 'content'})}: crosstune "
            "reads a message's role and content (and reasoning)",
            "message_role, message_content",
        )
    trained = entry.pop("roles_to_train", ["assistant"])
    if sorted({"gpt": "assistant"}.get(r, r) for r in trained or []) != ["assistant"]:
        port.miss(f"{key}.roles_to_train", f"{trained}: crosstune trains the assistant's messages", "assistant")
    eos = entry.pop("train_on_eos", "turn")
    if eos != "turn":
        port.miss(f"{key}.train_on_eos", f"{eos}: crosstune trains each assistant turn's end marker", "turn")
    entry.pop("chat_template", None)  # the global chat_template's check covers it
    for rest in entry:
        port.miss(f"{key}.{rest}", "a dataset option crosstune's sources do not have", "data.sources")
    return src, columns


def _training(port: Port, take: Keys) -> None:
    if take("learning_rate") is None:
        raise ImportRefused(f"{port.source}: learning_rate is missing (Axolotl requires it)")
    port.set("train.max_grad_norm", take("max_grad_norm") or None)
    set_every(port, take, "logging_steps", "train.log_every")
    set_every(port, take, "save_steps", "train.checkpoint_every")
    steps = set_length(port, take, "max_steps", "num_epochs")
    set_schedule(port, take, "lr_scheduler")
    for key in ("cosine_min_lr_ratio", "cosine_constant_lr_ratio", "optim_args", "lr_groups"):
        if take(key) is not None:
            port.miss(key, "a schedule or optimizer refinement crosstune's AdamW does not take", "train")
    _warmup(port, take, steps)
    if take("batch_size"):
        port.miss("batch_size", "Axolotl's total batch: crosstune derives it", "train.global_batch_size")
    set_held_out(port, take, "val_set_size", "Axolotl")
    bf16 = take("bf16")
    port.set("train.precision", "fp32" if bf16 is False and not take("fp16") else "bf16")
    if take("fp16"):
        port.miss("fp16", "float16 autocast", "train.precision bf16")
    set_adamw(port, take, "optimizer")
    recompute = take("gradient_checkpointing")
    if any([take("fsdp"), take("fsdp_config"), take("fsdp_version")]):
        port.set("backend.torch.fsdp", True)
    set_fsdp_recompute(port, take, bool(recompute))
    if isinstance(recompute, str) or take("activation_offloading"):
        key = "activation_offloading" if take("activation_offloading") else "gradient_checkpointing"
        port.miss(key, "activations offloaded to host memory", "train.gradient_checkpointing (recompute)")
    if take("tf32"):
        port.miss("tf32", "TF32 matmuls for the fp32 ops of a GPU run", "train.precision (bf16 matmuls)")
    for key in ("deepspeed", "sequence_parallel_degree", "context_parallel_size", "tensor_parallel_size"):
        if take(key) and (key == "deepspeed" or take(key) > 1):
            port.miss(key, "a parallelism crosstune's torch leg does not run", "backend.torch.fsdp (FSDP2)")


def _warmup(port: Port, take: Keys, steps: int | None) -> None:
    """Axolotl's warm-up: warmup_steps, else int(warmup_ratio × steps), else min(int(3 % of the steps), 100); a
    warm-up of 1 step becomes 2. With the steps unknown until the data is prepared, a ratio stays a ratio
    (train.warmup_ratio: crosstune rounds ratio × steps up where Axolotl rounds down)."""
    given, ratio = take("warmup_steps"), take("warmup_ratio")
    if given is not None:
        port.set("train.warmup_steps", AXOLOTL_MIN_WARMUP if given == 1 else given)
        return
    if steps:
        n = int(ratio * steps) if ratio is not None else min(int(0.03 * steps), 100)
        port.set("train.warmup_steps", AXOLOTL_MIN_WARMUP if n == 1 else n)
        return
    port.set("train.warmup_ratio", ratio if ratio is not None else 0.03)
    if ratio is not None:
        port.notes.append(
            f"train.warmup_ratio {ratio:g}: ceil({ratio:g} × steps), where Axolotl rounds down (one step more at most)"
        )
    else:
        port.notes.append(
            "train.warmup_ratio 0.03: Axolotl's default warm-up without warmup_steps or warmup_ratio, "
            "min(3 % of the steps, 100): over 3,333 steps crosstune's warms up longer"
        )


def _kernels(port: Port, take: Keys) -> None:
    attention = take("attn_implementation")
    switches = [name for name in (OTHER_ATTENTION[0], *ATTENTION_SWITCHES, OTHER_ATTENTION[1]) if take(name)]
    chosen = attention_of(attention) if attention else ATTENTION_SWITCHES.get(switches[0]) if switches else "sdpa"
    port.set("train.kernels.attention", chosen or "sdpa")
    if chosen is None:
        key = "attn_implementation" if attention else switches[0]
        port.miss(
            key,
            f"{attention or key}: not a kernel crosstune's torch leg switches to",
            "train.kernels.attention sdpa (flex: FlexAttention with document masks)",
        )
    if take("gemma4_hybrid_attn_impl"):
        port.miss(
            "gemma4_hybrid_attn_impl",
            "flash-attention on sliding layers, SDPA on global ones",
            "train.kernels.attention",
        )
    plugins = take("plugins") or []
    cce = take("cut_cross_entropy")  # read even when the plugin already says it
    if CCE_PLUGIN in plugins or cce:
        port.set("train.kernels.loss", "cce")
        port.set("train.kernels.token_metrics", False)  # the fused loss gives no per-token entropy or accuracy
    for plugin in plugins:
        if plugin != CCE_PLUGIN and "liger" not in plugin.lower():
            port.miss(f"plugins: {plugin}", "an Axolotl integration crosstune does not run", "train.kernels")
    liger = sorted(k for k in LIGER if take(k))
    if liger:
        port.miss(
            ", ".join(liger),
            "Liger's Triton kernels (norms, RoPE, GLU, fused linear cross-entropy)",
            "train.kernels.compile (torch.compile fuses norms, RoPE and GLU); train.kernels.loss cce for the "
            "fused loss",
        )
    for key in (*KERNELS, "experts_implementation", "quantize_moe_experts"):
        if take(key):
            port.miss(key, "an Axolotl kernel of its own", "train.kernels.compile")
