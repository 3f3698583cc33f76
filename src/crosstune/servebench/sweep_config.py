"""What one `bench serve` sweep is: its configuration, checked field by field against the option that sets it, and
the error every refusal of the bench raises."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.errors import CrosstuneError


class BenchError(CrosstuneError):
    """The benchmark can't run, or measured nothing; the message says why and what to do."""


def fresh_seed() -> int:
    """A new workload seed per run: two sweeps against one long-lived server must not send the same prompts."""
    return secrets.randbelow(2**31)


@dataclass
class SweepConfig:
    """One sweep. Every field is checked by `check()` (run_sweep calls it), naming the `bench serve` option."""

    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    tokenizer: Path
    contexts: list[int]
    concurrency: list[int] = field(default_factory=lambda: [1])
    rates: list[float] | None = None  # request rates (req/s) instead of concurrency levels
    max_concurrency: int | None = None  # with rates: the semaphore (None: unbounded)
    burstiness: float = 1.0
    output_len: int = 32
    num_requests: int = 16
    warmup: int = 2
    api: str = "completions"  # or "chat"
    timeout_s: float = 120.0  # deadline per request: the whole exchange
    cell_timeout_s: float = 600.0  # bound on a whole cell, warm-up included
    probe_timeout_s: float = 10.0
    slo_ms: dict[str, float] = field(default_factory=dict)  # servebench.slo names: {"p99_ttft_ms": 2000.0}
    seed: int | None = None  # the prompts' seed; None: a fresh one per run (run_sweep records it)
    prefix_reuse: float | None = None  # share of each prompt that is a prefix shared by the context's prompts
    repeats: int = 1  # runs per cell: intervals over them (servebench.repeats)
    find_max_rate: bool = False  # search the highest request rate meeting slo_ms (servebench.max_rate)
    max_rate_steps: int = 8  # cells the search may run per context
    rate_resolution: float = 0.1  # the search ends when missed / met rate <= 1 + this
    preset: str | None = None  # the named grid the contexts, levels and output length came from (servebench.presets)
    label: str | None = None
    target: str | None = None
    server_kv_cache: dict | None = None  # the KV cache the server logged allocating (`serve start` records it)
    server_drafter: dict | None = None  # {"model", "tokens"}: the server's MTP drafter (`serve start --draft`)

    def check(self) -> None:
        """BenchError naming the option of the first value that can't describe a sweep."""
        from crosstune.servebench.slo import check_slo

        def ints(option: str, values: list, least: int) -> None:
            if not values:
                raise BenchError(f"{option}: give at least one value")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < least:
                    raise BenchError(f"{option}: {v!r} is not an integer >= {least}")

        ints("--contexts", self.contexts, 1)
        if self.rates:
            for r in self.rates:
                if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r <= 0:
                    raise BenchError(
                        f"--rates: {r!r} is not a positive, finite request rate (req/s); for all requests at once "
                        "use --concurrency"
                    )
            if self.max_concurrency is not None:
                ints("--max-concurrency", [self.max_concurrency], 1)
        elif not self.find_max_rate:
            ints("--concurrency", self.concurrency, 1)
        ints("--output-len", [self.output_len], 1)
        ints("--num-requests", [self.num_requests], 1)
        ints("--warmup", [self.warmup], 0)
        ints("--repeats", [self.repeats], 1)
        if self.seed is not None:
            ints("--seed", [self.seed], 0)
        reuse = self.prefix_reuse
        if reuse is not None and (isinstance(reuse, bool) or not isinstance(reuse, int | float) or not 0 < reuse < 1):
            raise BenchError(
                f"--prefix-reuse: {reuse!r} is not a share of the prompt strictly between 0 and 1 (0.5: every "
                "prompt of a context starts with the same half)"
            )
        for option, v in (
            ("--burstiness", self.burstiness),
            ("--timeout", self.timeout_s),
            ("--cell-timeout", self.cell_timeout_s),
            ("--probe-timeout", self.probe_timeout_s),
            ("--rate-resolution", self.rate_resolution),
        ):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise BenchError(f"{option}: {v!r} is not a positive, finite number")
        if self.api not in ("completions", "chat"):
            raise BenchError(f"--api: {self.api!r} is not one of completions, chat")
        check_slo(self.slo_ms)
        if self.find_max_rate:
            if not self.slo_ms:
                raise BenchError("--find-max-rate: give the SLO to meet, e.g. --find-max-rate p99_ttft_ms=2000")
            if self.rates and len(self.rates) != 1:
                raise BenchError("--find-max-rate: --rates gives the one rate the search starts at, not a list")
            ints("--max-rate-steps", [self.max_rate_steps], 2)
        if not str(self.endpoint).startswith(("http://", "https://")):
            raise BenchError(f"--endpoint {self.endpoint!r}: expected a base URL such as http://127.0.0.1:8000")

    def levels(self) -> list[tuple[int | None, float | None]]:
        if self.rates:
            return [(self.max_concurrency, r) for r in self.rates]
        return [(c, None) for c in self.concurrency]
