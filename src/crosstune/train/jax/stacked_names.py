"""The names of a stacked model's tensors (crosstune.train.jax.layer_scan) and tunix's per-layer names they stand for.

A stacked tensor is `layers.<s>.stack.<p>.<rest>`: position p of segment s's groups, one [G, ...] array; a layer
after a segment's complete groups is `layers.<s>.tail.<i>.<rest>` (i: its layer number). Segments follow each other:
segment s starts where segment s - 1's last tail layer (or group) ends. One segment unless some layers reuse an
earlier layer's K/V (Gemma 4 E sizes: the layers that own their K/V, then those that share) and the two don't
make one body (crosstune.train.jax.kv_carry: the E4B); in one body, the K/V projections' LoRA is the first
(owning) groups' alone, [owning, ...], and maps to those layers.
"""

from __future__ import annotations

import re

from crosstune.errors import CrosstuneError

STACKED_NAME = re.compile(r"layers\.(\d+)\.stack\.(\d+)\.")  # crosstune.train.jax.lora.param_name of a stacked tensor
TAIL_NAME = re.compile(r"layers\.(\d+)\.tail\.(\d+)\.")
KV_LORA = re.compile(r"\.attn\.kv?_einsum\.\w*lora")  # a K/V projection's LoRA: of the owning groups alone (kv_carry)


class ScanError(CrosstuneError, ValueError):
    """A model whose layers backend.jax.scan_layers can't stack, or stacked names that don't map back."""


def layer_name(name: str) -> tuple[str, int]:
    """(the name with a stacked or tail layer's prefix as one layer's: `layers.<p>.…` for stacked position p; how
    many leading axes the tensor has beyond one layer's: 1 stacked, else 0), for rules that read names (the
    optimizer's)."""
    if m := STACKED_NAME.search(name):
        return f"{name[: m.start()]}layers.{m[2]}.{name[m.end() :]}", 1
    if m := TAIL_NAME.search(name):
        return f"{name[: m.start()]}layers.{m[2]}.{name[m.end() :]}", 0
    return name, 0


def _layout(params: dict) -> dict[int, tuple[int, int, int]]:
    """{segment: (first layer, groups, period)} from the stacked and tail names; ScanError (naming the tensor) when
    they don't make one layout: positions not 0..P-1, group counts that differ or no group axis, segments or tail
    layers that don't follow each other."""
    positions: dict[int, set[int]] = {}
    groups: dict[int, dict[str, int | None]] = {}
    tails: dict[int, set[int]] = {}
    named: dict[tuple, str] = {}  # a tensor of each segment and of each tail layer, to name in an error
    for name, value in params.items():
        if m := STACKED_NAME.match(name):
            positions.setdefault(int(m[1]), set()).add(int(m[2]))
            groups.setdefault(int(m[1]), {})[name] = (getattr(value, "shape", ()) or (None,))[0]
            named.setdefault((int(m[1]),), name)
        elif m := TAIL_NAME.match(name):
            tails.setdefault(int(m[1]), set()).add(int(m[2]))
            named.setdefault((int(m[1]), int(m[2])), name)
    for s in sorted(set(positions) | set(tails)):
        if s not in positions or s >= len(positions):
            raise ScanError(
                f"{named.get((s,)) or named[(s, min(tails[s]))]}: segment {s}, but the stacked names hold segments "
                f"{sorted(positions)}: not 0..S-1, each with stacked groups"
            )
    layout, first = {}, 0
    for s in sorted(positions):
        period = len(positions[s])
        if positions[s] != set(range(period)):
            raise ScanError(
                f"{named[(s,)]}: the stacked names of segment {s} hold group positions {sorted(positions[s])}: "
                "not 0..P-1"
            )
        counts = {name: g for name, g in groups[s].items() if not KV_LORA.search(name)}
        kv = {name: g for name, g in groups[s].items() if KV_LORA.search(name)}
        g = next(iter(counts.values()), None)
        for name, n in counts.items():
            if n is None or n != g:
                raise ScanError(
                    f"{name}: stacked with {n} groups, not as the other stacked tensors ({set(counts.values())})"
                )
        for name, n in kv.items():  # the owning groups' K/V LoRA of a one-body KV-sharing stack: the first ones'
            if n is None or n != next(iter(kv.values())) or (g is not None and n > g):
                raise ScanError(
                    f"{name}: stacked with {n} groups, not as the other K/V LoRA tensors ({set(kv.values())})"
                )
        g = g if g is not None else next(iter(kv.values()))
        layout[s] = (first, g, period)
        first += g * period
        tail = sorted(tails.get(s, ()))
        if tail != list(range(first, first + len(tail))):
            raise ScanError(
                f"{named[(s, tail[0])]}: segment {s}'s tail layers {tail} don't follow its groups (layers {first}…)"
            )
        first += len(tail)
    return layout


def per_layer(params: dict) -> dict:
    """{param name: array} with stacked names (module docstring) as tunix's per-layer ones (`layers.<first + g·P +
    p>.…` for the g-th group's slice of a stacked tensor, `layers.<i>.…` for a tail layer's); other names as they are.
    Refuses (ScanError, naming the tensor) names that don't make one layout, and two names for one layer's tensor."""
    layout = _layout(params)
    out = {}

    def put(name: str, value, source: str) -> None:
        if name in out:
            raise ScanError(f"{source}: a second tensor for {name}")
        out[name] = value

    for name, value in params.items():
        if m := STACKED_NAME.match(name):
            first, _, period = layout[int(m[1])]
            for g in range(value.shape[0]):
                put(f"layers.{first + g * period + int(m[2])}.{name[m.end() :]}", value[g], name)
        elif m := TAIL_NAME.match(name):
            put(f"layers.{m[2]}.{name[m.end() :]}", value, name)
        else:
            put(name, value, name)
    return out
