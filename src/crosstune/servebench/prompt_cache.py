"""The prefix cache, which can stand in for the hardware: what a sweep meant to measure (a cold workload, or a shared
prefix at a stated ratio) against what the server's own counters say it served from the cache.

A cold sweep draws fresh prompts from a per-run seed (servebench.workload), so no prompt block repeats; when vLLM's
`vllm:prefix_cache_hits` still counts hits in one of its cells (a repeated `--seed` against a long-lived server, as
in vllm #54227: TTFT 49× lower on one cell), that cell measured the cache, and is flagged. A `--prefix-reuse R`
sweep shares a prefix of R × context tokens between its prompts on purpose: its hits are the measurement. Two
sweeps are comparable only when they measured the same thing (`sweep_kind`: a workload dimension of
servebench.sweep_comparison's rule)."""

from __future__ import annotations

from collections.abc import Mapping

COLD = "cold"


def workload_kind(prefix_reuse: float | None) -> str:
    """'cold', or 'prefix reuse 0.5': what a sweep's prompts ask of the cache."""
    return COLD if not prefix_reuse else f"prefix reuse {prefix_reuse:g}"


def shared_prefix_tokens(context_len: int, prefix_reuse: float | None) -> int:
    """The tokens every prompt of a context shares: round(R × context), never the whole prompt."""
    if not prefix_reuse:
        return 0
    return min(context_len - 1, round(prefix_reuse * context_len))


def cell_cache(server: Mapping | None, prefix_reuse: float | None) -> dict:
    """A cell's prefix-cache figures from its /metrics deltas (servebench.server_metrics): prompt tokens queried, hit,
    the hit rate, and `flag` when a cold workload was served from the cache (None: nothing to flag)."""
    server = server or {}
    queries, hits = server.get("prefix_cache_queries"), server.get("prefix_cache_hits")
    out: dict = {"workload": workload_kind(prefix_reuse), "queries": queries, "hits": hits, "flag": None}
    out["hit_rate"] = hits / queries if queries and hits is not None else None
    if not prefix_reuse and hits:
        out["flag"] = (
            f"{hits:,.0f} of {queries:,.0f} prompt tokens were prefix-cache hits in a cold workload: this cell "
            "measured the cache, not the hardware (a repeated --seed against a long-lived server?); rerun without "
            "--seed, or restart the server"
        )
    return out


def flagged_cells(summary: Mapping) -> list[dict]:
    return [c for c in summary.get("cells", []) if (c.get("prefix_cache") or {}).get("flag")]


def sweep_kind(summary: Mapping) -> str:
    """What a sweep measured of the cache: 'cold', 'prefix reuse R', or 'cold workload served from the cache (N
    cells)' when the counters caught hits in a cold workload. A summary from before the counters reads as cold."""
    reuse = summary.get("prefix_reuse")
    if reuse:
        return workload_kind(reuse)
    flagged = flagged_cells(summary)
    if flagged:
        hits = sum(c["prefix_cache"]["hits"] for c in flagged)
        return f"a cold workload served from the cache ({len(flagged)} cell(s), {hits:,.0f} hit tokens)"
    return COLD
