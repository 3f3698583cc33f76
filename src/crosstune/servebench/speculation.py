"""Speculative decoding as the engine counts it: per cell, the drafts proposed and the tokens accepted, from vLLM's
own /metrics counters (vLLM 0.32 v1/spec_decode/metrics.py, SpecDecodingProm; registered only when the server runs
with a `--speculative-config`):
  vllm:spec_decode_num_drafts            drafting steps (one per request per decode step)
  vllm:spec_decode_num_draft_tokens      tokens proposed
  vllm:spec_decode_num_accepted_tokens   tokens the target accepted
  vllm:spec_decode_num_accepted_tokens_per_pos{position="k"}   accepted at draft position k
Acceptance rate = accepted / proposed; mean accepted length = 1 + accepted / drafts (vLLM's convention: the target's
own token counts); per position = accepted at k / drafts.

A sweep whose server drafts and one whose server doesn't are two configurations of one workload: `sweep_kind` is a
subject dimension of servebench.sweep_comparison's rule, so `bench compare` and the report set them side by side,
naming the difference."""

from __future__ import annotations

from collections.abc import Mapping

COUNTERS = {
    "spec_drafts": "vllm:spec_decode_num_drafts",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
NONE = "no drafter"


def per_position(diff: Mapping[str, float]) -> list[float] | None:
    """Accepted tokens per draft position from counter deltas keyed `name_total#position` (server_metrics.parse)."""
    found = {int(k.rsplit("#", 1)[1]): v for k, v in diff.items() if k.startswith(f"{PER_POSITION}_total#")}
    return [found.get(i, 0.0) for i in range(max(found) + 1)] if found else None


def cell_speculation(server: Mapping | None, drafter: Mapping | None = None) -> dict | None:
    """A cell's speculative-decoding figures from its /metrics deltas, None when the server ran no drafter (its
    /metrics has no spec_decode counters)."""
    server = server or {}
    drafts, proposed, accepted = (server.get(k) for k in COUNTERS)
    if drafts is None and proposed is None:
        return None
    positions = server.get("spec_accepted_per_position")
    return {
        "drafter": (drafter or {}).get("model"),
        "draft_tokens_per_step": (drafter or {}).get("tokens"),
        "drafts": drafts,
        "proposed_tokens": proposed,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / proposed if proposed and accepted is not None else None,
        "mean_accepted_length": 1.0 + accepted / drafts if drafts and accepted is not None else None,
        "acceptance_per_position": [a / drafts for a in positions] if drafts and positions else None,
    }


def sweep_kind(summary: Mapping) -> str:
    """'no drafter', or 'MTP drafter DRAFTER (N tokens)' / 'a drafter' (its counters, no name recorded)."""
    drafter = summary.get("server_drafter")
    if drafter:
        return f"MTP drafter {drafter.get('model')} ({drafter.get('tokens')} token(s) per step)"
    if any(c.get("speculation") for c in summary.get("cells", [])):
        return "a drafter (the engine's spec_decode counters)"
    return NONE


def line(cell: Mapping) -> str | None:
    """'acceptance 11.6 % (1,234 of 10,640 proposed), mean accepted length 1.23' for a drafted cell."""
    s = cell.get("speculation")
    if not s or s.get("acceptance_rate") is None:
        return None
    text = (
        f"acceptance {100 * s['acceptance_rate']:.1f} % ({s['accepted_tokens']:,.0f} of {s['proposed_tokens']:,.0f} "
        f"proposed), mean accepted length {s['mean_accepted_length']:.2f}"
    )
    if s.get("acceptance_per_position"):
        text += " (per position: " + ", ".join(f"{100 * p:.1f} %" for p in s["acceptance_per_position"]) + ")"
    return text
