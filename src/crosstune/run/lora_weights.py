"""Backend-neutral LoRA weights, and PEFT adapter directories (adapter_config.json + adapter_model.safetensors).

`LoraWeights.modules` maps an HF module name in the text-only layout (`model.layers.3.self_attn.k_proj`, what
`Family.hf_lora_modules` lists) to PEFT's (lora_A [r, in], lora_B [out, r]); delta W = scale · B @ A with one
scale = alpha / rank for every module. A module may hold a wider rank than `rank` (an imported k/v pair, see
crosstune.families.lora_layout): it is written with PEFT's rank_pattern/alpha_pattern so that its scale is the same.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crosstune.errors import CrosstuneError
from crosstune.families import family_of_hf_config, get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.model_configs import ADAPTER_CONFIG, read_adapter_config, read_model_config
from crosstune.patterns import user_pattern
from crosstune.run.shards import SafetensorsFile, save_numpy_file
from crosstune.untrusted_files import parse_json

ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
# Decoder-layer prefixes of the language model: text-only checkpoints, then official multimodal ones.
LAYER_PREFIXES = ("model.layers.", "model.language_model.layers.", "language_model.model.layers.")
_LEAF_TO_TARGET = {v: k for k, v in HF_TARGET_MODULES.items()}
_MODULE = re.compile(r"model\.layers\.(\d+)\.(.+)")
_UNSUPPORTED = {  # adapter_config.json field -> why an exporter that merges W + scale·B@A can't take it
    "use_dora": "DoRA rescales the merged weight's columns",
    "use_qalora": "QA-LoRA pools the input features",
    "modules_to_save": "fully trained copies of whole modules are not LoRA",
    "trainable_token_indices": "trained embedding rows are not LoRA",
    "target_parameters": "LoRA on raw parameters (MoE experts) is not supported",
    "lora_bias": "a LoRA bias term is not supported",
}


class ExportError(CrosstuneError, RuntimeError):
    """An export can't proceed; the message names the file or tensor and what to do."""


@dataclass
class LoraWeights:
    family: str
    rank: int
    alpha: float
    targets: tuple[str, ...]  # neutral targets, as in the recipe
    modules: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return float(self.alpha) / self.rank

    def delta(self, module: str) -> np.ndarray:
        """scale · B @ A in float32: [out, in]."""
        a, b = self.modules[module]
        return (np.asarray(b, np.float32) @ np.asarray(a, np.float32)) * np.float32(self.scale)

    def check_values(self, bound: float, where: str = "LoRA") -> None:
        """Every A/B value is finite and within `bound` (crosstune.run.integrity.lora_magnitude_bound): beyond it
        the tensor can't come from training (a damaged file); ExportError naming the tensor."""
        for name, (a, b) in self.modules.items():
            for part, x in (("lora_A", a), ("lora_B", b)):
                x = np.asarray(x, np.float32)
                finite = np.isfinite(x)
                if not finite.all():
                    raise ExportError(
                        f"{where}: {name}.{part}: {int((~finite).sum())} of {x.size} values are not finite (a damaged "
                        "checkpoint or a diverged run); export another step (--step N)"
                    )
                peak = float(np.abs(x).max()) if x.size else 0.0
                if peak > bound:
                    raise ExportError(
                        f"{where}: {name}.{part}: |value| up to {peak:.3g}, beyond the {bound:.3g} this run's learning "
                        "rate and steps can reach (a damaged checkpoint); restore it or export another step (--step N)"
                    )

    def check(self, spec: ModelSpec, where: str = "LoRA") -> None:
        """Every module exists in `spec` and its A/B shapes fit the layer (ExportError naming the first that
        doesn't)."""
        if spec.family != self.family:
            raise ExportError(f"{where}: LoRA for family {self.family!r}, but the base model is {spec.family!r}")
        for name, (a, b) in self.modules.items():
            layer, target = module_target(name)
            if layer >= spec.num_layers:
                raise ExportError(f"{where}: {name}: layer {layer}, but the base model has {spec.num_layers} layers")
            shapes = spec.projection_shapes(layer)
            if target not in shapes:
                raise ExportError(
                    f"{where}: {name}: layer {layer} ({spec.layer_types[layer]}) has no {target} projection"
                )
            out, fan_in = shapes[target]
            r = a.shape[0]
            if a.ndim != 2 or b.ndim != 2 or a.shape != (r, fan_in) or b.shape != (out, r):
                raise ExportError(
                    f"{where}: {name}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} don't fit the base layer: "
                    f"expected [r, {fan_in}] and [{out}, r]"
                )


def module_target(name: str) -> tuple[int, str]:
    """`model.layers.3.self_attn.k_proj` -> (3, "k")."""
    m = _MODULE.fullmatch(name)
    if m is None or m.group(2) not in _LEAF_TO_TARGET:
        raise ExportError(f"{name}: not a LoRA target module (expected model.layers.N.<{'|'.join(_LEAF_TO_TARGET)}>)")
    return int(m.group(1)), _LEAF_TO_TARGET[m.group(2)]


def text_module_name(name: str) -> str:
    """A decoder-layer module name under any known prefix -> the text-only layout (`model.layers.N...`)."""
    for prefix in LAYER_PREFIXES:
        if name.startswith(prefix):
            return "model.layers." + name[len(prefix) :]
    raise ExportError(f"{name}: not under a language-model decoder prefix ({', '.join(LAYER_PREFIXES)})")


def _pattern_value(patterns: dict, name: str, default, where: str):
    """PEFT's rank_pattern/alpha_pattern lookup (peft.utils.other.get_pattern_key), each key a user pattern matched
    under a bound on its work (crosstune.patterns)."""
    for key, value in patterns.items():
        if user_pattern(key, f"{where}: {key!r}", suffix=True)(name):
            return value
    return default


def read_peft_adapter(adapter_dir: Path, family: str | None = None) -> tuple[LoraWeights, dict]:
    """A PEFT adapter directory -> (LoraWeights, its adapter_config.json). Refuses what a merge can't reproduce
    exactly (DoRA, modules_to_save, ...) and any tensor that is not a lora_A/lora_B weight of a target module.
    Per-module ranks/alphas (rank_pattern, alpha_pattern, rslora) are folded into B so one scale fits all."""
    from safetensors.numpy import load_file

    adapter_dir = Path(adapter_dir)
    cfg_path, weights_path = adapter_dir / ADAPTER_CONFIG, adapter_dir / ADAPTER_WEIGHTS
    for p in (cfg_path, weights_path):
        if not p.is_file():
            raise ExportError(f"{adapter_dir}: no {p.name} (expected a PEFT adapter directory)")
    cfg = read_adapter_config(adapter_dir)
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ExportError(f"{cfg_path}: peft_type {cfg.get('peft_type')!r}, only LORA adapters can be exported")
    for key, why in _UNSUPPORTED.items():
        if cfg.get(key):
            raise ExportError(f"{cfg_path}: {key} is set: {why}")
    if cfg.get("bias", "none") != "none":
        raise ExportError(f"{cfg_path}: bias={cfg['bias']!r}: trained biases are not supported (use bias='none')")
    if cfg.get("fan_in_fan_out"):
        raise ExportError(f"{cfg_path}: fan_in_fan_out is for Conv1D layers; Gemma projections are nn.Linear")
    rank, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not rank or alpha is None:
        raise ExportError(f"{cfg_path}: r / lora_alpha missing: the LoRA scale is unknown")

    tensors = _load_bf16_safe(weights_path, load_file)
    _drop_vllm_v_aliases(tensors, weights_path)
    pairs: dict[str, dict[str, np.ndarray]] = {}
    stored: dict[str, str] = {}  # text-only name -> the module name as the adapter stores it (patterns match it)
    for key, value in tensors.items():
        m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.default)?\.weight", key)
        if m is None:
            raise ExportError(f"{weights_path}: tensor {key!r} is not a lora_A/lora_B weight (left unconsumed)")
        try:
            name = text_module_name(m.group(1))
            module_target(name)
        except ExportError as e:
            raise ExportError(f"{weights_path}: tensor {key!r}: {e}") from None
        pairs.setdefault(name, {})[m.group(2)] = value
        stored[name] = m.group(1)
    modules: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    scale = float(alpha) / rank
    for name, ab in sorted(pairs.items(), key=lambda kv: _order(kv[0])):
        if set(ab) != {"A", "B"}:
            missing = ({"A", "B"} - set(ab)).pop()
            raise ExportError(f"{weights_path}: {name} has no lora_{missing} (an adapter needs both)")
        a, b = ab["A"].astype(np.float32), ab["B"].astype(np.float32)
        r_m = _pattern_value(cfg.get("rank_pattern") or {}, stored[name], rank, f"{cfg_path}: rank_pattern")
        alpha_m = _pattern_value(cfg.get("alpha_pattern") or {}, stored[name], alpha, f"{cfg_path}: alpha_pattern")
        if a.shape[0] != r_m:
            raise ExportError(f"{weights_path}: {name}.lora_A has rank {a.shape[0]}, adapter_config says {r_m}")
        s_m = float(alpha_m) / (np.sqrt(r_m) if cfg.get("use_rslora") else r_m)
        if s_m != scale:
            b = b * np.float32(s_m / scale)
        modules[name] = (a, b)
    if not modules:
        raise ExportError(f"{weights_path}: no LoRA tensors")
    targets = tuple(t for t in HF_TARGET_MODULES if any(module_target(n)[1] == t for n in modules))
    fam = family or _family_from_config(cfg, adapter_dir)
    return LoraWeights(fam, int(rank), float(alpha), targets, modules), cfg


def _load_bf16_safe(path: Path, load_file) -> dict[str, np.ndarray]:
    """safetensors.numpy can't load bf16: read those through our header reader (crosstune.run.shards)."""

    st = SafetensorsFile(path)
    if all(info.dtype != "BF16" for info in st.tensors.values()):
        return load_file(str(path))
    return {name: st.read(name) for name in st.tensors}


def _order(name: str) -> tuple[int, int]:
    layer, target = module_target(name)
    return layer, list(HF_TARGET_MODULES).index(target)


def _family_from_config(cfg: dict, adapter_dir: Path) -> str:
    base = cfg.get("base_model_name_or_path")
    if base and (Path(base) / "config.json").is_file():
        return family_of_hf_config(read_model_config(Path(base))).name
    raise ExportError(
        f"{adapter_dir}: can't tell the model family (base_model_name_or_path {base!r} has no config.json); pass it"
    )


def write_peft_adapter(
    lora: LoraWeights,
    out_dir: Path,
    base_model: str | None,
    spec: ModelSpec | None = None,
    layer_prefix: str = "model.layers.",
    dtype: str = "float32",
) -> list[Path]:
    """Write `lora` as a PEFT adapter into `out_dir` (which must exist); returns the files written.

    `layer_prefix` is where the base keeps its decoder layers (`model.language_model.layers.` for multimodal
    checkpoints). target_modules is the family's regex (language model only) when the adapted modules are exactly
    those the regex selects in `spec`, otherwise the explicit list of module names."""
    if dtype not in ("float32", "float16"):
        raise ExportError(f"adapter dtype {dtype!r}: float32 or float16 (numpy has no bfloat16)")
    fam = get_family(lora.family)
    names = {n: layer_prefix + n[len("model.layers.") :] for n in lora.modules}
    if spec is not None and set(lora.modules) == set(fam.hf_lora_modules(spec, list(lora.targets))):
        target_modules: str | list[str] = fam.peft_target_regex(list(lora.targets))
    else:
        target_modules = sorted(names.values())
    rank_pattern, alpha_pattern = {}, {}
    for name, (a, _) in lora.modules.items():
        if a.shape[0] != lora.rank:  # a wider module (e.g. an imported block k/v LoRA): same scale alpha/rank
            key = re.escape(names[name])
            rank_pattern[key] = int(a.shape[0])
            alpha_pattern[key] = float(lora.alpha) * a.shape[0] / lora.rank
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": target_modules,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern,
        "modules_to_save": None,
        "inference_mode": True,
    }
    tensors = {}
    for name, (a, b) in lora.modules.items():
        key = PEFT_PREFIX + names[name]
        tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(a, dtype=dtype)
        tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(b, dtype=dtype)
    aliases = _add_vllm_v_aliases(tensors, lora, spec, names)
    out_dir = Path(out_dir)
    metadata = {"format": "pt", VLLM_ALIAS_KEY: json.dumps(aliases)} if aliases else {"format": "pt"}
    save_numpy_file(tensors, out_dir / ADAPTER_WEIGHTS, metadata)
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return [out_dir / ADAPTER_WEIGHTS, out_dir / ADAPTER_CONFIG]


# --- vLLM serving of Gemma 4 k_eq_v layers ---------------------------------------------------------------------
# vLLM builds V from K's weight on k_eq_v layers but applies only a v_proj LoRA to it, while in PEFT (and HF) the
# values are the keys, k_proj LoRA included. The exported adapter therefore also carries v_proj tensors equal to
# k_proj's on those layers (PEFT has no such module there and ignores them); the safetensors metadata names them so
# that read_peft_adapter drops them again.
VLLM_ALIAS_KEY = "crosstune.vllm_v_aliases"


def _add_vllm_v_aliases(
    tensors: dict[str, np.ndarray], lora: LoraWeights, spec: ModelSpec | None, names: dict[str, str]
) -> list[str]:
    """Add v_proj = k_proj LoRA tensors on k_eq_v layers of `spec`; returns the PEFT module keys added."""
    if spec is None:
        return []
    added = []
    for name in lora.modules:
        layer, target = module_target(name)
        if target != "k" or not spec.kind(layer).k_eq_v:
            continue
        k_key = PEFT_PREFIX + names[name]
        v_key = k_key[: -len("k_proj")] + "v_proj"
        for part in ("lora_A", "lora_B"):
            tensors[f"{v_key}.{part}.weight"] = tensors[f"{k_key}.{part}.weight"]
        added.append(v_key)
    return added


def _drop_vllm_v_aliases(tensors: dict[str, np.ndarray], weights_path: Path) -> None:
    """Remove the v_proj tensors that `_add_vllm_v_aliases` wrote, after checking they still equal k_proj's."""

    aliases = parse_json(SafetensorsFile(weights_path).metadata.get(VLLM_ALIAS_KEY, "[]"), weights_path)
    for v_key in aliases:
        k_key = v_key[: -len("v_proj")] + "k_proj"
        for part in ("lora_A", "lora_B"):
            v, k = tensors.pop(f"{v_key}.{part}.weight", None), tensors.get(f"{k_key}.{part}.weight")
            if v is None or k is None or not np.array_equal(v, k):
                raise ExportError(
                    f"{weights_path}: {v_key}.{part} is listed in the metadata's {VLLM_ALIAS_KEY} as a copy of "
                    f"{k_key}.{part}, but {'is missing' if v is None or k is None else 'differs'}: the file was edited"
                )
