"""Qwix LoRA on tunix modules <-> PEFT LoRA on HF nn.Linear modules (shared/notes/gemma.md, "HF <-> Tunix").

PEFT: lora_A [r, in], lora_B [out, r], delta W = scale · B @ A (W is [out, in]).
Qwix on an einsum: A holds the weight's contracted axes + r, B holds r + the weight's output axes:
    q_einsum  'BTD,NDH'   A (D, r)     B (r, N, H)        k_einsum (k_eq_v) likewise with K heads
    kv_einsum 'BSD,CKDH'  A (D, r)     B (r, 2, K, H)     one A SHARED by k and v
    qkv_einsum 'BTD,SNDH' A (D, r)     B (r, 3, N, H)     one A shared by q, k and v (Gemma 3 when N == K)
    attn_vec  'BTNH,NHD'  A (N, H, r)  B (r, D)
    mlp gate/up (Linear D->F): A (D, r) B (r, F); down (F->D): A (F, r) B (r, D)
The scale alpha/rank comes from the Qwix rule, not from the arrays: a module may hold a wider A/B (see below).

Fused einsums (kv, qkv) share one A. A PEFT adapter whose k and v carry different A matrices is not a shared-A
LoRA of the same rank; it is represented EXACTLY as a block LoRA of rank c·r (c = the einsum's components, in
order): A = [A_k | A_v], B = [[B_k, 0], [0, B_v]] over (rank, component); a component without LoRA gets zero blocks.
Qwix contracts whatever rank the arrays hold and scales by the rule's alpha/rank, so the scale is unchanged.
`fused_block_mask` marks the off-diagonal blocks, which must stay zero (masked gradients) while training continues
for the pair to remain a PEFT k/v pair. Back to PEFT: rank r -> the shared A for every component; rank c·r with zero
off-diagonal blocks -> each component's own (A, B) of rank r; any other width -> each component gets the whole A
and its B slice (exact, rank = that width).
"""

from __future__ import annotations

import numpy as np

from crosstune.errors import CrosstuneError
from crosstune.families.spec import AttentionKind

# tunix module (within a layer) -> the neutral targets its output components are, in order.
FUSED = {"attn.kv_einsum": ("k", "v"), "attn.qkv_einsum": ("q", "k", "v")}
SINGLE = {
    "attn.q_einsum": "q",
    "attn.k_einsum": "k",
    "attn.attn_vec_einsum": "o",
    "mlp.gate_proj": "gate",
    "mlp.up_proj": "up",
    "mlp.down_proj": "down",
}
TUNIX_LORA_MODULES = (*SINGLE, *FUSED)

Pair = tuple[np.ndarray, np.ndarray]  # (A, B)


class LoraLayoutError(CrosstuneError, ValueError):
    """A LoRA tensor whose shape or module does not fit the model layout; the message names it."""


def _heads(module: str, kind: AttentionKind) -> int:
    return kind.num_heads if module in ("attn.q_einsum", "attn.qkv_einsum") else kind.num_kv_heads


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
    w = a.shape[-1]
    d, f, n, h = hidden, intermediate, kind.num_heads, kind.head_dim
    if module in FUSED:
        comps = FUSED[module]
        heads = _heads(module, kind)
        _expect(f"{where}_lora_a", a, (d, w))
        _expect(f"{where}_lora_b", b, (w, len(comps), heads, h))
        if w == len(comps) * rank and w != rank and not _off_diagonal(b, rank).any():
            out = {}
            for j, t in enumerate(comps):
                a_j, b_j = a[:, j * rank : (j + 1) * rank], b[j * rank : (j + 1) * rank, j]
                if a_j.any() or b_j.any():  # an all-zero block is a component without LoRA
                    out[t] = (a_j.T, b_j.reshape(rank, heads * h).T)
            return out
        return {t: (a.T, b[:, i].reshape(w, heads * h).T) for i, t in enumerate(comps)}
    r = w
    if module not in SINGLE:
        raise LoraLayoutError(f"{where}: no HF module known for tunix module {module!r} (LoRA tensor left unconsumed)")
    target = SINGLE[module]
    if module in ("attn.q_einsum", "attn.k_einsum"):
        heads = _heads(module, kind)
        _expect(f"{where}_lora_a", a, (d, r))
        _expect(f"{where}_lora_b", b, (r, heads, h))
        return {target: (a.T, b.reshape(r, heads * h).T)}
    if module == "attn.attn_vec_einsum":
        _expect(f"{where}_lora_a", a, (n, h, r))
        _expect(f"{where}_lora_b", b, (r, d))
        return {target: (a.reshape(n * h, r).T, b.T)}
    fan_in, fan_out = (f, d) if target == "down" else (d, f)
    _expect(f"{where}_lora_a", a, (fan_in, r))
    _expect(f"{where}_lora_b", b, (r, fan_out))
    return {target: (a.T, b.T)}


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
    if module in FUSED:
        comps = FUSED[module]
        present = [t for t in comps if t in pairs]
        if not present:
            raise LoraLayoutError(f"{where}: none of {comps} has a LoRA to import")
        heads, h = _heads(module, kind), kind.head_dim
        r = pairs[present[0]][0].shape[0]
        for t in present:
            a_t, b_t = pairs[t]
            _expect(f"{where} ({t}) lora_A", a_t, (r, hidden))
            _expect(f"{where} ({t}) lora_B", b_t, (heads * h, r))
        first = pairs[present[0]][0]
        if len(present) == 1 or (shared and all(np.array_equal(pairs[t][0], first) for t in present)):
            b = np.zeros((r, len(comps), heads, h), dtype=first.dtype)
            for t in present:
                b[:, comps.index(t)] = pairs[t][1].T.reshape(r, heads, h)
            return first.T, b
        a = np.zeros((hidden, r * len(comps)), dtype=first.dtype)
        b = np.zeros((r * len(comps), len(comps), heads, h), dtype=first.dtype)
        for t in present:
            j = comps.index(t)
            a[:, j * r : (j + 1) * r] = pairs[t][0].T
            b[j * r : (j + 1) * r, j] = pairs[t][1].T.reshape(r, heads, h)
        return a, b
    if module not in SINGLE:
        raise LoraLayoutError(f"{where}: unknown tunix LoRA module {module!r}")
    target = SINGLE[module]
    if target not in pairs:
        raise LoraLayoutError(f"{where}: no {target} LoRA to import")
    a_p, b_p = pairs[target]
    r = a_p.shape[0]
    if module in ("attn.q_einsum", "attn.k_einsum"):
        heads, h = _heads(module, kind), kind.head_dim
        _expect(f"{where} lora_A", a_p, (r, hidden))
        _expect(f"{where} lora_B", b_p, (heads * h, r))
        return a_p.T, b_p.T.reshape(r, heads, h)
    if module == "attn.attn_vec_einsum":
        n, h = kind.num_heads, kind.head_dim
        _expect(f"{where} lora_A", a_p, (r, n * h))
        _expect(f"{where} lora_B", b_p, (hidden, r))
        return a_p.T.reshape(n, h, r), b_p.T
    fan_in, fan_out = (intermediate, hidden) if target == "down" else (hidden, intermediate)
    _expect(f"{where} lora_A", a_p, (r, fan_in))
    _expect(f"{where} lora_B", b_p, (fan_out, r))
    return a_p.T, b_p.T


def _off_diagonal(b: np.ndarray, rank: int) -> np.ndarray:
    """The entries of a block B (c·r, c, ...) outside its diagonal blocks."""
    return b * (1.0 - _diagonal(b.shape, rank))


def _diagonal(b_shape: tuple[int, ...], rank: int) -> np.ndarray:
    mask = np.zeros(b_shape, dtype=np.float32)
    for j in range(b_shape[1]):
        mask[j * rank : (j + 1) * rank, j] = 1.0
    return mask


def fused_block_mask(module: str, b_shape: tuple[int, ...], rank: int) -> np.ndarray | None:
    """For a fused einsum's block LoRA B (rank c·r), a 0/1 mask that is 0 on the off-diagonal blocks (component j's
    rank rows feeding another component): multiply B's gradient by it. None when B is an ordinary rank-r LoRA."""
    if module not in FUSED or b_shape[0] == rank:
        return None
    if b_shape[0] != rank * len(FUSED[module]):
        raise LoraLayoutError(
            f"{module}: B of rank {b_shape[0]} is neither rank {rank} nor a {len(FUSED[module])}-block"
        )
    return _diagonal(b_shape, rank)
