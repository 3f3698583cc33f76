"""Qwix LoRA on tunix modules <-> PEFT LoRA on HF nn.Linear modules (docs/TUNIX_LAYOUT.md, "LoRA").

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.families.lora_layout"."""

from __future__ import annotations

import math

import numpy as np

from crosstune.errors import CrosstuneError
from crosstune.families import FAMILIES
from crosstune.families.spec import AttentionKind
from crosstune.families.tunix_table import TunixParam, axis_sizes, lora_modules

# tunix LoRA module (within a layer) -> its table row, over every family.
LORA_ROWS: dict[str, TunixParam] = lora_modules([f.tunix for f in FAMILIES.values()])
# tunix module -> the neutral targets its output components are, in order (fused einsums) / its one target.
FUSED = {m: r.lora for m, r in LORA_ROWS.items() if r.fused}
SINGLE = {m: r.lora[0] for m, r in LORA_ROWS.items() if not r.fused}
# tunix module -> the name of its weight (`w` on einsums, `kernel` on Linear layers)
WEIGHT_NAMES = {m: r.weight for m, r in LORA_ROWS.items()}

Pair = tuple[np.ndarray, np.ndarray]  # (A, B)


class LoraLayoutError(CrosstuneError, ValueError):
    """A LoRA tensor whose shape or module does not fit the model layout; the message names it."""


def _row(module: str, where: str) -> TunixParam:
    if module not in LORA_ROWS:
        raise LoraLayoutError(f"{where}: no HF module known for tunix module {module!r} (LoRA tensor left unconsumed)")
    return LORA_ROWS[module]


def _expect(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise LoraLayoutError(f"{name}: shape {tuple(arr.shape)}, expected {tuple(shape)} for this layer")


def qwix_to_peft(
    module: str,
    a: np.ndarray,
    b: np.ndarray,
    kind: AttentionKind,
    hidden: int,
    intermediate: int,
    rank: int,
    where: str = "",
) -> dict[str, Pair]:
    """One tunix module's Qwix LoRA (A, B) -> {neutral target: (lora_A [r, in], lora_B [out, r])}, exactly.

    `rank` is the rule's (nominal) rank; a fused einsum may hold a wider block LoRA (module docstring)."""
    where = where or module
    row = _row(module, where)
    a_dims, b_dims = row.lora_dims(axis_sizes(kind, hidden, intermediate))
    w = a.shape[-1]
    _expect(f"{where}_lora_a", a, (*a_dims, w))
    _expect(f"{where}_lora_b", b, (w, *b_dims))
    if row.fused:
        comps, out = row.lora, math.prod(b_dims[1:])  # B's first non-rank axis is the fused parts
        if w == len(comps) * rank and w != rank and not _off_diagonal(b, rank).any():
            pairs = {}
            for j, t in enumerate(comps):
                a_j, b_j = a[:, j * rank : (j + 1) * rank], b[j * rank : (j + 1) * rank, j]
                if a_j.any() or b_j.any():  # an all-zero block is a component without LoRA
                    pairs[t] = (a_j.T, b_j.reshape(rank, out).T)
            return pairs
        return {t: (a.T, b[:, i].reshape(w, out).T) for i, t in enumerate(comps)}
    return {row.lora[0]: (a.reshape(math.prod(a_dims), w).T, b.reshape(w, math.prod(b_dims)).T)}


def peft_to_qwix(
    module: str,
    pairs: dict[str, Pair],
    kind: AttentionKind,
    hidden: int,
    intermediate: int,
    where: str = "",
    shared: bool = True,
) -> Pair:
    """PEFT (lora_A [r, in], lora_B [out, r]) of the targets one tunix module covers -> its Qwix (A, B), exactly.

    For a fused einsum, components missing from `pairs` get zero B; when one component is present, or (with
    `shared`) the present components' A matrices are equal, the result has rank r (shared A), otherwise it is the
    block LoRA of rank c·r (module docstring). `shared=False` maps arrays that are not weights (gradients, masks)
    the way weights with different A matrices were mapped."""
    where = where or module
    row = _row(module, where)
    a_dims, b_dims = row.lora_dims(axis_sizes(kind, hidden, intermediate))
    fan_in = math.prod(a_dims)
    if row.fused:
        comps, parts_dims = row.lora, b_dims[1:]
        present = [t for t in comps if t in pairs]
        if not present:
            raise LoraLayoutError(f"{where}: none of {comps} has a LoRA to import")
        r = pairs[present[0]][0].shape[0]
        for t in present:
            a_t, b_t = pairs[t]
            _expect(f"{where} ({t}) lora_A", a_t, (r, fan_in))
            _expect(f"{where} ({t}) lora_B", b_t, (math.prod(parts_dims), r))
        first = pairs[present[0]][0]
        if len(present) == 1 or (shared and all(np.array_equal(pairs[t][0], first) for t in present)):
            b = np.zeros((r, len(comps), *parts_dims), dtype=first.dtype)
            for t in present:
                b[:, comps.index(t)] = pairs[t][1].T.reshape(r, *parts_dims)
            return first.T.reshape(*a_dims, r), b
        a = np.zeros((fan_in, r * len(comps)), dtype=first.dtype)
        b = np.zeros((r * len(comps), len(comps), *parts_dims), dtype=first.dtype)
        for t in present:
            j = comps.index(t)
            a[:, j * r : (j + 1) * r] = pairs[t][0].T
            b[j * r : (j + 1) * r, j] = pairs[t][1].T.reshape(r, *parts_dims)
        return a.reshape(*a_dims, r * len(comps)), b
    target = row.lora[0]
    if target not in pairs:
        raise LoraLayoutError(f"{where}: no {target} LoRA to import")
    a_p, b_p = pairs[target]
    r = a_p.shape[0]
    _expect(f"{where} lora_A", a_p, (r, fan_in))
    _expect(f"{where} lora_B", b_p, (math.prod(b_dims), r))
    return a_p.T.reshape(*a_dims, r), b_p.T.reshape(r, *b_dims)


def _off_diagonal(b: np.ndarray, rank: int) -> np.ndarray:
    """The entries of a block B (c·r, c, ...) outside its diagonal blocks."""
    return b * (1.0 - _diagonal(b.shape, rank))


def _diagonal(b_shape: tuple[int, ...], rank: int, xp=np):
    """1 on component j's own `rank` rows of a block B (c·r, c, ...), 0 elsewhere, B's shape; `xp`: numpy, or
    jax.numpy inside a traced step (built from iotas: no B-sized constant in the program)."""
    rows, comps = xp.arange(b_shape[0])[:, None] // rank, xp.arange(b_shape[1])[None, :]
    mask = (rows == comps).astype(xp.float32).reshape(tuple(b_shape[:2]) + (1,) * (len(b_shape) - 2))
    return xp.broadcast_to(mask, tuple(b_shape))


def fused_block_mask(module: str, b_shape: tuple[int, ...], rank: int, xp=np):
    """For a fused einsum's block LoRA B (rank c·r), a 0/1 mask that is 0 on the off-diagonal blocks (component j's
    rank rows feeding another component): multiply B's gradient by it (`xp` as in _diagonal). None when B is an
    ordinary rank-r LoRA."""
    if module not in FUSED or b_shape[0] == rank:
        return None
    if b_shape[0] != rank * len(FUSED[module]):
        raise LoraLayoutError(
            f"{module}: B of rank {b_shape[0]} is neither rank {rank} nor a {len(FUSED[module])}-block"
        )
    return _diagonal(b_shape, rank, xp)
