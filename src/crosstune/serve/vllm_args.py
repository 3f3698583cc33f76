"""What `vllm serve` is started with for a plan: every flag with its reason (`Flag`), and the docker line that runs the
same command in vLLM's GPU or TPU image (the model, an adapter and a local drafter mounted, the engine's settings
passed as environment). serve.plan decides the layout and capacity; this module only spells them out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crosstune.emit import shell_word, shell_words
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.serve.drafter import DRAFT_MOUNT, Drafter
from crosstune.serve.engine import TEXT_ONLY_FLAG, max_lora_rank

IMAGES = {"gpu": "vllm/vllm-openai:latest", "tpu": "vllm/vllm-tpu:latest"}
TPU_MAX_BATCHED_TOKENS = 2048  # XLA compiles one graph per power-of-two bucket up to this: fewer = faster start
MODEL_MOUNT = "/model"
CONTAINER_HF_HOME = "/root/.cache/huggingface"  # where a hub-id model's host cache is mounted in vLLM's images


@dataclass(frozen=True)
class Flag:
    args: tuple[str, ...]
    why: str


def serve_flags(
    recipe: Recipe, spec: ModelSpec, platform: str, dp: int, tp: int, kv_dtype: str, mm: bool, port: int, name: str
) -> list[Flag]:
    """The flags of `vllm serve` for dp × tp on `platform`, each with its reason (`mm`: a multimodal checkpoint,
    served for text only)."""
    s = recipe.serve
    dtype = recipe.model.dtype if platform == "cpu" else "bfloat16"
    flags = [
        Flag(("--served-model-name", name), "the name clients put in the request's `model` field"),
        Flag(("--dtype", dtype), "vLLM's default silently converts fp32 checkpoints to bf16: say which"),
        Flag(("--max-model-len", str(s.max_model_len)), "prompt + output limit; sizes the KV cache a sequence may use"),
    ]
    if platform == "cpu":
        flags += [
            Flag(("--host", "127.0.0.1", "--port", str(port)), "loopback only on this machine"),
        ]
        return flags
    if dp > 1:
        flags.append(
            Flag(
                ("--data-parallel-size", str(dp)),
                f"{dp} replicas, each with its own KV cache and scheduler, each over {tp} chips",
            )
        )
    flags += [
        Flag(
            ("--tensor-parallel-size", str(tp)),
            f"shard heads and MLP over {tp} chips (checked against every layer type's query and KV heads)",
        ),
        Flag(
            ("--gpu-memory-utilization", str(s.gpu_memory_utilization)),
            "share of each chip's HBM vLLM takes for weights, activations and KV cache",
        ),
        Flag(("--port", str(port)), "the OpenAI-compatible server's port"),
    ]
    if kv_dtype == "fp8":
        flags.append(
            Flag(("--kv-cache-dtype", "fp8"), "1 byte per K/V element where the chip allocates it (see notes)")
        )
    if mm:
        flags.append(Flag((TEXT_ONLY_FLAG,), "text-only serving: no memory reserved for the encoders' inputs"))
    if platform == "tpu":
        flags.append(
            Flag(
                ("--max-num-batched-tokens", str(TPU_MAX_BATCHED_TOKENS)),
                "XLA precompiles one graph per "
                "power-of-two token bucket up to this; start-up is ~10 min for 31B without a cache",
            )
        )
        if spec.family == "gemma4":
            flags.append(
                Flag(
                    ("--disable_chunked_mm_input",),
                    "vLLM-TPU's Gemma 4 recipe: multimodal inputs are not split across scheduler steps",
                )
            )
    return flags


def adapter_flags(name: str, adapter: Path, rank: int) -> list[Flag]:
    """Serving a LoRA adapter of rank `rank` as model NAME-lora beside the base."""
    return [
        Flag(("--enable-lora",), "serve LoRA adapters on top of the base weights"),
        Flag(
            ("--lora-modules", f"{name}-lora={adapter}"),
            f"the adapter, requested as model {name}-lora (the base stays {name})",
        ),
        Flag(
            ("--max-lora-rank", str(max_lora_rank(rank))),
            f"adapter rank {rank} rounded up to an allowed value (1, 8, 16, 32, 64, 128, 256, 320, 512)",
        ),
    ]


def _host_path(path: str) -> str:
    """A host path for a shell line: `~/x` becomes "$HOME/x" (expanded on the machine that runs it)."""
    return f'"$HOME/{path[2:]}"' if path.startswith("~/") else shell_word(path)


def docker_line(
    platform: str,
    flags: list[Flag],
    env: dict[str, str],
    model_dir: str,
    recipe: Recipe,
    port: int,
    *,
    adapter: Path | None,
    name: str,
    drafter: Drafter | None,
) -> str | None:
    """The docker command that serves `model_dir` with `flags` on a GPU or TPU host (None on CPU: no image)."""
    if platform == "cpu":
        return None
    args = [a for f in flags for a in f.args]
    served = MODEL_MOUNT
    mounts = f"-v {_host_path(str(recipe.model.path or model_dir))}:{MODEL_MOUNT}:ro"
    if hub_model_id(recipe.model.path):  # served by id from the hub cache
        served, mounts = model_dir, f'-v "$HOME/.cache/huggingface":{CONTAINER_HF_HOME}'
    if adapter is not None:  # the adapter is mounted at /adapter and named there
        mounts += f" -v {_host_path(str(adapter))}:/adapter:ro"
        args = [f"{name}-lora=/adapter" if a == f"{name}-lora={adapter}" else a for a in args]
    if drafter is not None and drafter.local:  # a local drafter folder is mounted at /drafter
        mounts += f" -v {_host_path(drafter.model)}:{DRAFT_MOUNT}:ro"
        args = [drafter.config(DRAFT_MOUNT) if a == drafter.config() else a for a in args]
    elif drafter is not None and CONTAINER_HF_HOME not in mounts:  # a hub-id drafter: the host's hub cache
        mounts += f' -v "$HOME/.cache/huggingface":{CONTAINER_HF_HOME}'
    if platform == "gpu":
        head = ["docker", "run", "--gpus", "all", "--ipc=host", "-p", f"{port}:{port}"]
    else:  # TPU: host network and devices; XLA's compile cache kept across restarts
        head = [
            "docker",
            "run",
            "--privileged",
            "--net=host",
            "--shm-size=16G",
            "-v",
            "/tmp/vllm-xla-cache:/xla-cache",
            "-e",
            "VLLM_XLA_CACHE_PATH=/xla-cache",
        ]
    for k, v in env.items():  # the engine's own settings travel into the container
        head += ["-e", f"{k}={v}"]
    tail = ["--entrypoint", "vllm", IMAGES[platform], "serve", served, *args]
    return f"{shell_words(head)} {mounts} {shell_words(tail)}"
