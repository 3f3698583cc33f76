"""Merged-export throughput and memory: crosstune's streaming merge (`merge_lora_into_shards`) against (a) a plain
copy of the same bytes and (b) a naive merge that loads the whole checkpoint, on a synthetic multi-GB bf16 checkpoint
with Gemma 4 31B-shaped layers, measured in the same run.

    .venv/bin/python bench/export.py                    # 4 sliding + 1 global 31B layers, bf16, ~5.3 GB, 6 shards
    .venv/bin/python bench/export.py --sliding 2 --global-layers 1 --rank 32 --dir /big/disk

The checkpoint: official multimodal names (`model.language_model.layers.N...`), one shard per layer plus one for
the embedding (vocab 32768) and norms, an index, a Gemma 4 config.json; LoRA rank 16 on q, k, v, o, gate, up, down
(random, fp32). Every variant runs in its own subprocess (peak RSS = that process's ru_maxrss, interpreter and
imports included) and fsyncs what it wrote inside the timed region. GB/s = checkpoint bytes / wall seconds. The
naive merge's output is compared with the streaming merge's, tensor by tensor. The multi-GB files are deleted at
the end (also on failure).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from crosstune.units import MIB, bytes_to_gb

HIDDEN, INTERMEDIATE, HEADS, KV, HEAD_DIM, GLOBAL_KV, GLOBAL_HEAD_DIM = 5376, 21504, 32, 16, 256, 4, 512
VOCAB = 32768
TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def bench_spec(sliding: int, global_layers: int):
    from crosstune.families.gemma4 import make_spec
    from crosstune.families.spec import ModelSpec

    base = make_spec(
        "bench-31b-layers", 6, HIDDEN, INTERMEDIATE, HEADS, KV, HEAD_DIM, GLOBAL_KV, GLOBAL_HEAD_DIM, 1024, VOCAB
    )
    types = ("sliding",) * sliding + ("global",) * global_layers
    return ModelSpec(**{**base.__dict__, "layer_types": types})


# --- the synthetic checkpoint ------------------------------------------------------------------------------------
def _write_shard(path: Path, tensors: list[tuple[str, tuple[int, ...]]], block: np.ndarray) -> int:
    """A bf16 safetensors file whose tensors are tiled from `block` (valid bf16 values), written streaming."""
    header, offset = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    data = block.tobytes()
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        left = offset
        while left:
            f.write(data[: min(left, len(data))])
            left -= min(left, len(data))
    return 8 + len(raw) + offset


def make_checkpoint(out: Path, spec) -> int:
    from crosstune.families import get_family
    from crosstune.families.base import HF_TARGET_MODULES

    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    block = (rng.standard_normal(32 * 2**20, dtype=np.float32) * 0.02).view(np.uint32)
    block = (block >> 16).astype(np.uint16)  # truncated to bf16: valid finite values
    p = "model.language_model."
    shards = [[(f"{p}embed_tokens.weight", (VOCAB, HIDDEN)), (f"{p}norm.weight", (HIDDEN,))]]
    for i in range(spec.num_layers):
        a, lay = spec.kind(i), f"{p}layers.{i}."
        names = [
            (f"{lay}{n}.weight", (HIDDEN,))
            for n in (
                "input_layernorm",
                "post_attention_layernorm",
                "pre_feedforward_layernorm",
                "post_feedforward_layernorm",
            )
        ]
        names += [(f"{lay}self_attn.q_norm.weight", (a.head_dim,)), (f"{lay}self_attn.k_norm.weight", (a.head_dim,))]
        names += [(f"{lay}{HF_TARGET_MODULES[t]}.weight", shape) for t, shape in spec.projection_shapes(i).items()]
        names += [(f"{lay}layer_scalar", (1,))]
        shards.append(names)
    weight_map, total = {}, 0
    for k, tensors in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        total += _write_shard(out / fname, tensors, block)
        weight_map.update({name: fname for name, _ in tensors})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    text = get_family("gemma4").hf_config(spec, dtype="bfloat16")
    (out / "config.json").write_text(json.dumps({"model_type": "gemma4", "text_config": text}, indent=1))
    return total


def bench_lora(spec, rank: int):
    from crosstune.families import get_family
    from crosstune.run.lora_weights import LoraWeights

    rng = np.random.default_rng(1)
    modules = {}
    for name in get_family("gemma4").hf_lora_modules(spec, TARGETS):
        layer, leaf = int(name.split(".")[2]), name.split(".")[-1]
        target = {
            "q_proj": "q",
            "k_proj": "k",
            "v_proj": "v",
            "o_proj": "o",
            "gate_proj": "gate",
            "up_proj": "up",
            "down_proj": "down",
        }[leaf]
        out, fan_in = spec.projection_shapes(layer)[target]
        modules[name] = (
            (rng.standard_normal((rank, fan_in), dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32),
            rng.standard_normal((out, rank), dtype=np.float32) * 0.01,
        )
    return LoraWeights("gemma4", rank, 2.0 * rank, tuple(TARGETS), modules)


# --- variants (each in its own process) ------------------------------------------------------------------------
def fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def variant_copy(base: Path, out: Path, spec, rank: int) -> dict:
    out.mkdir()
    for f in base.iterdir():
        shutil.copyfile(f, out / f.name)
    return {}


def variant_stream(base: Path, out: Path, spec, rank: int) -> dict:
    from crosstune.export.merge import merge_lora_into_shards

    lora = bench_lora(spec, rank)
    out.mkdir()
    hashes = merge_lora_into_shards(base, lora, out)
    return {"hashes": hashes}


def variant_naive(base: Path, out: Path, spec, rank: int) -> dict:
    """Load every shard, merge in memory, save (what merge_and_unload + save_pretrained amounts to)."""
    import torch
    from safetensors.torch import load_file, save_file

    lora = bench_lora(spec, rank)
    out.mkdir()
    weight_map = json.loads((base / "model.safetensors.index.json").read_text())["weight_map"]
    files = sorted(set(weight_map.values()))
    everything = {f: load_file(str(base / f)) for f in files}
    prefix = "model.language_model."
    for tensors in everything.values():
        for name in list(tensors):
            module = "model." + name[len(prefix) :].removesuffix(".weight")
            if module in lora.modules:
                a, b = lora.modules[module]
                b_scaled = torch.from_numpy(b * np.float32(lora.scale))
                tensors[name] = (tensors[name].float() + b_scaled @ torch.from_numpy(a)).to(torch.bfloat16)
    for f, tensors in everything.items():
        save_file(tensors, str(out / f), metadata={"format": "pt"})
    for f in base.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copyfile(f, out / f.name)
    return {}


VARIANTS = {"copy": variant_copy, "stream": variant_stream, "naive": variant_naive}


def peak_rss() -> int:
    """This process's peak resident set (VmHWM: unlike ru_maxrss, not inherited from the parent across fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(args) -> None:
    spec = bench_spec(args.sliding, args.global_layers)
    t0, c0 = time.perf_counter(), _cpu()
    extra = VARIANTS[args.variant](Path(args.base), Path(args.out), spec, args.rank)
    fsync_dir(Path(args.out))
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_rss": peak_rss(), **extra}))


def _cpu() -> float:
    """User + system CPU seconds of this process, all threads (in-kernel copying counts as system time)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_variant(name: str, base: Path, out: Path, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--base",
        str(base),
        "--out",
        str(out),
        "--rank",
        str(args.rank),
        "--sliding",
        str(args.sliding),
        "--global-layers",
        str(args.global_layers),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"variant {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(stream_dir: Path, naive_dir: Path) -> tuple[int, int]:
    """(tensors compared, tensors whose bytes differ) between two merged checkpoints."""
    from crosstune.run.shards import SafetensorsFile

    differ = total = 0
    for f in sorted(stream_dir.glob("*.safetensors")):
        a, b = SafetensorsFile(f), SafetensorsFile(naive_dir / f.name)
        for name, info in a.tensors.items():
            total += 1
            rows = info.shape[0]
            step = max(1, (64 * MIB) // max(1, info.nbytes // max(rows, 1)))
            for lo in range(0, rows, step):
                if not np.array_equal(
                    a.read_rows(name, lo, min(rows, lo + step)), b.read_rows(name, lo, min(rows, lo + step))
                ):
                    differ += 1
                    break
    return total, differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sliding", type=int, default=4, help="31B-shaped sliding layers")
    parser.add_argument("--global-layers", type=int, default=1, help="31B-shaped global (k_eq_v) layers")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None, help="where the multi-GB files go (default: a temp dir)")
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.variant = args.child
        return child(args)
    root = Path(tempfile.mkdtemp(prefix="bench-export-", dir=args.dir))
    try:
        run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args) -> None:
    spec = bench_spec(args.sliding, args.global_layers)
    t0 = time.perf_counter()
    size = make_checkpoint(root / "base", spec)
    fsync_dir(root / "base")
    shards = len(list((root / "base").glob("*.safetensors")))
    print(
        f"checkpoint: {bytes_to_gb(size):.2f} GB in {shards} shards ({spec.num_layers} 31B-shaped layers, bf16), "
        f"written in {time.perf_counter() - t0:.1f} s; LoRA rank {args.rank} on {', '.join(TARGETS)}"
    )
    results = {}
    for name in ("copy", "stream", "naive", "copy"):  # copy twice: the disk's speed drifts on a shared machine
        out = root / f"out-{name}"
        r = run_variant(name, root / "base", out, args)
        key = name if name not in results else "copy (again)"
        results[key] = r
        print(
            f"{key:>13}: {r['wall']:6.1f} s wall {bytes_to_gb(size / r['wall']):5.2f} GB/s | {r['cpu']:6.1f} s CPU "
            f"| peak RSS {r['peak_rss'] / MIB:6.0f} MiB ({r['peak_rss'] / size:.1%} of the checkpoint)"
        )
        if name == "naive":
            total, differ = compare(root / "out-stream", out)
            print(f"       naive vs streaming merge: {total - differ}/{total} tensors byte-identical")
        if name != "stream":
            shutil.rmtree(out)
    copy_wall = min(results["copy"]["wall"], results["copy (again)"]["wall"])
    s = results["stream"]
    print(
        f"streaming merge: {copy_wall / s['wall']:.0%} of plain-copy throughput (wall, best copy), "
        f"{results['naive']['wall'] / s['wall']:.2f}× the naive merge; peak RSS {s['peak_rss'] / size:.1%} of the "
        f"checkpoint (naive: {results['naive']['peak_rss'] / size:.0%}); load average at the end: "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
