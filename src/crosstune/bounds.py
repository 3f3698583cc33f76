"""Numbers checked where they enter, and the one table of their bounds.

`number`/`whole`: the right type (a JSON/YAML number, never a string or a boolean), finite, and in range — otherwise
an InputError naming the file and field (a NaN price printed `$nan/h`; an infinite throughput priced serving at $0.00).

OPTIONS: every numeric option of every command, bounded (`model build --layers 1000000000` allocated until killed;
`serve plan --tp 0` became 8; `bench serve --num-requests 100000000` built its workload before any cell could time
out). The command line checks each before the command runs (crosstune.cli); a test fails when an option has none.
RECIPE: the recipe's numbers, which recipe.schema declares with these bounds (ge/le), so one table holds both."""

from __future__ import annotations

import math
from dataclasses import dataclass

from crosstune.errors import InputError


def number(
    where: str,
    value: object,
    *,
    low: float | None = None,
    low_open: bool = False,
    high: float | None = None,
    unit: str = "",
) -> float:
    """`value` as a float if it is a finite number within [low, high] (low excluded with `low_open`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: {value!r} is not a number{_range(low, low_open, high, unit)}")
    if not math.isfinite(value):
        raise InputError(f"{where}: {value!r} is not a finite number{_range(low, low_open, high, unit)}")
    if (low is not None and (value < low or (low_open and value == low))) or (high is not None and value > high):
        raise InputError(f"{where}: {value!r} is not a number{_range(low, low_open, high, unit)}")
    return float(value)


def whole(where: str, value: object, *, low: int = 0, high: int | None = None, unit: str = "") -> int:
    """`value` if it is an int >= low and <= high (not a bool, not 2.0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        top = f" and <= {high:,}" if high is not None else ""
        raise InputError(f"{where}: {value!r} is not a whole number >= {low}{top}{f' ({unit})' if unit else ''}")
    return value


def _range(low: float | None, low_open: bool, high: float | None, unit: str) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    text = (" " + " and ".join(parts)) if parts else ""
    return text + (f" ({unit})" if unit else "")


@dataclass(frozen=True)
class Bound:
    """[low, high] (low excluded with `low_open`) of a number that counts `what`."""

    low: float
    high: float
    what: str
    low_open: bool = False
    high_open: bool = False  # recipes only (pydantic's lt)

    def span(self) -> str:
        """'optimizer steps: more than 0, at most 100,000,000'."""
        shown = [f"{int(v):,}" if float(v).is_integer() else f"{v:g}" for v in (self.low, self.high)]
        low = f"{'more than' if self.low_open else 'at least'} {shown[0]}"
        return f"{self.what}: {low}, {'less than' if self.high_open else 'at most'} {shown[1]}"

    def check(self, where: str, value: object, *, integer: bool) -> object:
        """`value` unchanged when within the bound (None: not given); else the InputError naming `where`."""
        if value is None:
            return None
        if integer:
            return whole(where, value, low=int(self.low), high=int(self.high), unit=self.what)
        number(where, value, low=self.low, low_open=self.low_open, high=self.high, unit=self.what)
        return value


SEED = Bound(0, 2**32 - 1, "a random seed")
STEPS = Bound(1, 10**8, "optimizer steps")
NODES = Bound(1, 4096, "hosts")
NODE_RANK = Bound(0, 4095, "this host's index, 0 = the lead")
PORT = Bound(1, 65535, "a TCP port")
MAX_DAYS = 3653.0  # ten years: no accelerator is rented longer; a longer horizon is a typo
MAX_TP = 1024  # tensor-parallel ranks: more than any node or pod slice holds
MAX_LAYERS = 1024  # decoder layers: a model build or a plan never goes past its size's, and no Gemma has 100
MAX_REQUESTS = 100_000  # requests of one bench cell: at a few ms each the longest --cell-timeout would be spent
MAX_REPEATS = 100  # repeats of a bench grid: each repeats every cell
DRAFT_TOKENS = Bound(1, 16, "tokens drafted per step (vLLM runs the MTP drafter once per drafted token)")
FIT_STEPS = Bound(0, 100_000, "steps fitting the drafter (0: left random)")

# "COMMAND --option" (or "--option" for every command with it) -> its bound.
OPTIONS: dict[str, Bound] = {
    "--seed": SEED,
    "--nodes": NODES,
    "--node-rank": NODE_RANK,
    "--port": PORT,
    "--shards": Bound(1, 1000, "safetensors files"),
    "eval --n": Bound(1, 10_000, "samples per problem"),
    "eval --temperature": Bound(0, 10, "sampling temperature"),
    "eval --top-p": Bound(0, 1, "nucleus probability", low_open=True),
    "eval --max-tokens": Bound(1, 10_000_000, "tokens per completion"),
    "eval --shots": Bound(0, 3, "examples in the prompt"),
    "eval --concurrency": Bound(1, 4096, "requests in flight"),
    "eval --workers": Bound(1, 1024, "judge processes"),
    "eval --timeout": Bound(1, 86_400, "seconds per simulation"),
    "eval --connect-timeout": Bound(0.01, 3600, "seconds"),
    "eval --read-timeout": Bound(0.01, 86_400, "seconds"),
    "eval --request-timeout": Bound(0.01, 7 * 86_400, "seconds"),
    "eval --retries": Bound(0, 100, "retries per request"),
    "eval --memory-mib": Bound(64, 1_000_000, "MiB per simulation"),
    "eval --batch-size": Bound(1, 100_000, "prompts per batch"),
    "export --step": Bound(0, 10**8, "the checkpoint's step"),
    "parity --dropout": Bound(0, 0.99, "LoRA dropout probability"),
    "parity --dropout-samples": Bound(1, 10_000, "dropout draws"),
    "train --devices": Bound(1, 65_536, "devices of this host"),
    "recipe import --source-devices": Bound(1, 65_536, "GPUs the config trained on"),
    "recipe import --global-batch": Bound(1, 10**8, "rows per optimizer step"),
    "plan --layers": Bound(1, MAX_LAYERS, "decoder layers"),
    "plan --max-compiles": Bound(3, 1000, "XLA compiles"),
    "plan --steps": Bound(1, 10_000, "micro-steps timed"),
    "report --days": Bound(0, MAX_DAYS, "days of serving"),
    "report --tokens-per-day": Bound(0, 1e15, "output tokens per day"),
    "report --context": Bound(1, 10_000_000, "tokens"),
    "study --pretrain-steps": STEPS,
    "synth --n": Bound(0, 1_000_000, "training records"),
    "synth --n-eval": Bound(0, 100_000, "eval problems"),
    "pretrain --steps": STEPS,
    "demo --n-train": Bound(1, 1_000_000, "training records"),
    "demo --n-eval": Bound(1, 100_000, "eval problems"),
    "demo --steps": STEPS,
    "demo --base-steps": STEPS,
    "cost train --restart-minutes": Bound(0, 7 * 1440, "minutes to restart"),
    "cost train --preemptions-per-hour": Bound(0, 3600, "preemptions per hour"),
    "cost tco --days": Bound(0, MAX_DAYS, "days of serving"),
    "cost tco --tokens-per-day": Bound(0, 1e15, "output tokens per day"),
    "cost tco --hours-per-day": Bound(0, 24, "hours a day"),
    "cost what-if --tokens": Bound(0, 1e15, "trained tokens", low_open=True),
    "cost what-if --tokens-per-s": Bound(0, 1e12, "trained tokens/s", low_open=True),
    "cost what-if --mfu": Bound(0, 1, "a fraction of the bf16 peak", low_open=True),
    "cost what-if --seq-len": Bound(1, 10_000_000, "tokens"),
    "serve plan --tp": Bound(1, MAX_TP, "tensor-parallel ranks"),
    "serve plan --dp": Bound(1, MAX_TP, "data-parallel replicas"),
    "serve start --max-model-len": Bound(1, 10_000_000, "tokens"),
    "serve start --kv-cache-gib": Bound(1, 4096, "GiB of KV cache"),
    "serve plan --draft-tokens": DRAFT_TOKENS,
    "serve start --draft-tokens": DRAFT_TOKENS,
    "bench serve --max-concurrency": Bound(1, 10_000, "requests in flight"),
    "bench serve --contexts": Bound(1, 10_000_000, "prompt tokens"),  # comma lists: servebench.cli checks each item
    "bench serve --concurrency": Bound(1, 10_000, "requests in flight"),
    "bench serve --rates": Bound(0, 1_000_000, "requests per second", low_open=True),
    "bench serve --burstiness": Bound(0, 1000, "the gamma shape of arrivals", low_open=True),
    "bench serve --output-len": Bound(1, 1_000_000, "tokens per request"),
    "bench serve --num-requests": Bound(1, MAX_REQUESTS, "requests per cell"),
    "bench serve --warmup": Bound(0, 10_000, "requests before a cell"),
    "bench serve --timeout": Bound(0, 86_400, "seconds per request", low_open=True),
    "bench serve --cell-timeout": Bound(0, 7 * 86_400, "seconds per cell", low_open=True),
    "bench serve --probe-timeout": Bound(0, 3600, "seconds", low_open=True),
    "bench serve --prefix-reuse": Bound(0, 1, "the fraction of a prompt shared"),
    "bench serve --repeats": Bound(1, MAX_REPEATS, "runs of the grid"),
    "bench serve --max-rate-steps": Bound(1, 100, "rates tried"),
    "bench serve --rate-resolution": Bound(0, 1, "a fraction of the rate", low_open=True),
    "model build --layers": Bound(1, MAX_LAYERS, "decoder layers, at most the size's"),
    # at most Gemma's own: a tokenizer of that many tokens is trained for the build, and 10,000,000 ran > 90 s, > 4 GiB
    "model build --vocab": Bound(16, 262_144, "tokens in the vocabulary, at most Gemma's 262,144"),
    "model tiny --fit-steps": FIT_STEPS,
    "model build --fit-steps": FIT_STEPS,
}


POSITIVE = {"low": 0, "low_open": True}  # a count or size of at least 1, a rate or price above 0
# YAML path of a recipe number -> its bound; recipe.schema declares each field with it (recipe.section.bounded).
RECIPE: dict[str, Bound] = {
    "lora.rank": Bound(high=4096, what="LoRA rank", **POSITIVE),
    "lora.alpha": Bound(high=1e6, what="LoRA alpha", **POSITIVE),
    "lora.dropout": Bound(0, 1, "LoRA dropout probability", high_open=True),
    "data.max_seq_len": Bound(high=10_000_000, what="tokens", **POSITIVE),
    "data.subsample.size": Bound(high=10**8, what="records", **POSITIVE),
    "data.subsample.seed": SEED,
    "train.epochs": Bound(high=1e6, what="passes over the data", **POSITIVE),
    "train.max_steps": Bound(high=STEPS.high, what=STEPS.what, **POSITIVE),
    "train.learning_rate": Bound(high=10, what="learning rate", **POSITIVE),
    "train.warmup_steps": Bound(0, STEPS.high, STEPS.what),
    "train.warmup_ratio": Bound(0, 1, "a fraction of the run's optimizer steps"),
    "train.weight_decay": Bound(0, 10, "weight decay"),
    "train.adam_beta1": Bound(0, 1, "Adam's beta1", high_open=True),
    "train.adam_beta2": Bound(0, 1, "Adam's beta2", high_open=True),
    "train.adam_eps": Bound(high=1, what="Adam's epsilon", **POSITIVE),
    "train.max_grad_norm": Bound(high=1e6, what="gradient norm", **POSITIVE),
    "train.per_device_batch_size": Bound(high=65_536, what="rows per device", **POSITIVE),
    "train.grad_accumulation": Bound(high=1_000_000, what="micro-batches per step", **POSITIVE),
    "train.global_batch_size": Bound(high=10**8, what="rows per step", **POSITIVE),
    "train.log_every": Bound(high=STEPS.high, what=STEPS.what, **POSITIVE),
    "train.checkpoint_every": Bound(high=STEPS.high, what=STEPS.what, **POSITIVE),
    "train.keep_last": Bound(high=10_000, what="checkpoints kept", **POSITIVE),
    "train.seed": SEED,
    "backend.torch.devices": Bound(high=65_536, what="devices per host", **POSITIVE),
    "backend.torch.nodes": Bound(high=NODES.high, what=NODES.what, **POSITIVE),
    "backend.jax.mesh.fsdp": Bound(high=65_536, what="devices on the fsdp axis", **POSITIVE),
    "backend.jax.mesh.tp": Bound(high=MAX_TP, what="devices on the tp axis", **POSITIVE),
    # a TPU TensorCore's vector memory: 128 MiB on v5e and v6e, 64 on v5p (the step checks its chip's: xla_options)
    "backend.jax.scoped_vmem_kib": Bound(high=128 * 1024, what="KiB of a TPU core's vector memory", **POSITIVE),
    "serve.max_model_len": Bound(high=10_000_000, what="tokens", **POSITIVE),
    "serve.tensor_parallel_size": Bound(high=MAX_TP, what="tensor-parallel ranks", **POSITIVE),
    "serve.gpu_memory_utilization": Bound(high=1, what="a fraction of the accelerator's memory", **POSITIVE),
    "serve.port": PORT,
    "serve.contexts": Bound(high=10_000_000, what="prompt tokens", **POSITIVE),
    "serve.concurrency": Bound(high=10_000, what="requests in flight", **POSITIVE),
    "serve.output_tokens": Bound(high=1_000_000, what="tokens per request", **POSITIVE),
    "eval.samples": Bound(high=10_000, what="samples per problem", **POSITIVE),
    "eval.k": Bound(high=10_000, what="pass@k", **POSITIVE),
    "eval.temperature": Bound(0, 10, "sampling temperature"),
    "eval.top_p": Bound(high=1, what="nucleus probability", **POSITIVE),
    "eval.max_tokens": Bound(high=10_000_000, what="tokens per completion", **POSITIVE),
    "eval.connect_timeout_s": Bound(high=3600, what="seconds", **POSITIVE),
    "eval.read_timeout_s": Bound(high=86_400, what="seconds", **POSITIVE),
    "eval.request_timeout_s": Bound(high=7 * 86_400, what="seconds", **POSITIVE),
    "cost.price_per_hour": Bound(high=1e6, what="$/hour", **POSITIVE),
    "cost.serve_hours_per_month": Bound(high=744, what="hours a month", **POSITIVE),
}


def option_bound(command: str, option: str) -> Bound | None:
    """The bound of `option` ("--tp") of `command` ("serve plan"), or None when the table has none."""
    return OPTIONS.get(f"{command} {option}", OPTIONS.get(option))
