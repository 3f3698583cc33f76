"""`model build` without torch (a TPU host's jax-only install): the numpy writer writes the torch writer's files of
the text layout — the same tensor names, shapes and dtypes (read off the family's HF <-> Tunix table), the same
config, generation config and tokenizer, values drawn by the same rules — and transformers and the jax loader read
them; the multimodal layout is refused without torch in one line naming what to install."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from crosstune.models.build import build_checkpoint
from crosstune.run.shards import SafetensorsFile
from tests.helpers.export import assert_logits_close
from tests.helpers.paths import REPO

# The torch writer's models of the session (fp32, one file, seed 0, the synthetic corpus's tokenizer)
TORCH_BUILDS = {
    ("gemma3", "tiny"): "tiny_gemma3_dir",
    ("gemma4", "tiny"): "tiny_gemma4_dir",  # the 31B's layout: k_eq_v globals, 2x global head_dim
    ("gemma4", "tiny-e"): "tiny_gemma4_e_dir",  # per-layer inputs, KV-shared layers, double-wide MLP
    ("gemma4", "tiny-moe"): "tiny_gemma4_moe_dir",  # the experts, router and their norms
}
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def _tensors(folder) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) over every .safetensors file of the folder."""
    return {n: (t.dtype, t.shape) for f in folder.glob("*.safetensors") for n, t in SafetensorsFile(f).tensors.items()}


def _values(folder) -> dict[str, np.ndarray]:
    """Each tensor role's values (a layer's tensors pooled over the layers, `layers.*.`), as float32."""
    pooled: dict[str, list[np.ndarray]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        file = SafetensorsFile(f)
        for name in file.tensors:
            pooled.setdefault(re.sub(r"layers\.\d+\.", "layers.*.", name), []).append(file.read(name).ravel())
    return {role: np.concatenate(parts) for role, parts in pooled.items()}


def _loads_in_transformers(folder) -> None:
    """AutoModelForCausalLM reads every tensor (none missing, unexpected or of another shape); finite logits."""
    import torch
    import transformers

    model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    with torch.no_grad():
        logits = model(torch.arange(3, 43)[None]).logits
    assert logits.shape == (1, 40, model.config.vocab_size) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize(("family", "size"), list(TORCH_BUILDS))
def test_the_numpy_writer_writes_the_torch_writers_files(family, size, request, synth_corpus_dir, tmp_path):
    """Same files, same side files byte for byte, same tensors; each tensor role (a layer's tensors pooled) drawn from
    the torch writer's distribution (mean and std within 5 standard errors): norms about their identity (Gemma 3: 0,
    Gemma 4: 1), layer scalars, the small models' embedding std, the router's; transformers loads it."""
    torch_dir = request.getfixturevalue(TORCH_BUILDS[(family, size)])
    out = build_checkpoint(family, tmp_path / "m", size=size, seed=0, corpus_dir=synth_corpus_dir, writer="numpy")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in torch_dir.iterdir())
    for name in SIDE_FILES:
        assert (out / name).read_bytes() == (torch_dir / name).read_bytes(), name
    assert _tensors(out) == _tensors(torch_dir)
    assert SafetensorsFile(out / "model.safetensors").metadata == {"format": "pt"}  # transformers' loader needs it
    ours, theirs = _values(out), _values(torch_dir)
    for role, want in theirs.items():
        got, n, sd = ours[role], want.size, float(max(want.std(), ours[role].std()))
        assert abs(got.mean() - want.mean()) <= 5 * sd * math.sqrt(2 / n), role
        assert abs(got.std() - want.std()) <= 5 * sd / math.sqrt(n), role
        assert got.min() >= want.min() - 5 * sd and got.max() <= want.max() + 5 * sd, role
    scalars = ours.get("model.layers.*.layer_scalar", np.ones(1))  # Gemma 4's
    assert scalars.min() >= 0.5 and scalars.max() <= 1.5 and (family == "gemma3" or scalars.std() > 0)
    if "model.embed_tokens_per_layer.weight" in ours:  # transformers zeroes the padding row (pad id 0)
        per_layer = SafetensorsFile(out / "model.safetensors").read("model.embed_tokens_per_layer.weight")
        assert not per_layer[0].any() and per_layer[1].any()
    _loads_in_transformers(out)


def test_bf16_shards_and_an_index_as_save_pretrained_writes_them(synth_corpus_dir, tmp_path):
    """bf16 in 3 shards: the torch writer's tensors, index keys and metadata (parameters without buffers, bytes);
    a tensor's values do not depend on the shard count; the same arguments give the same bytes."""
    args = dict(size="tiny-e", dtype="bfloat16", seed=0, corpus_dir=synth_corpus_dir)
    torch_dir = build_checkpoint("gemma4", tmp_path / "torch", shards=3, writer="torch", **args)
    sharded = build_checkpoint("gemma4", tmp_path / "numpy", shards=3, writer="numpy", **args)
    index, want = (json.loads((d / "model.safetensors.index.json").read_text()) for d in (sharded, torch_dir))
    assert index["metadata"] == want["metadata"] and index["weight_map"].keys() == want["weight_map"].keys()
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    assert _tensors(sharded) == _tensors(torch_dir) and {d for d, _ in _tensors(sharded).values()} == {"BF16"}
    whole = build_checkpoint("gemma4", tmp_path / "whole", shards=1, writer="numpy", **args)
    one = SafetensorsFile(whole / "model.safetensors")
    for name, file in index["weight_map"].items():
        assert np.array_equal(SafetensorsFile(sharded / file).read(name), one.read(name)), name
    again = build_checkpoint("gemma4", tmp_path / "again", shards=3, writer="numpy", **args)
    for file in sorted(set(index["weight_map"].values())):
        assert (again / file).read_bytes() == (sharded / file).read_bytes()
    _loads_in_transformers(sharded)


def test_the_numpy_writers_memory_check_counts_a_shard(monkeypatch):
    """The full-depth 31B in bf16 (61 GB): the numpy writer holds a shard and the tensor being drawn, so 16 shards fit
    in 12 GB where one file does not; the torch writer's figure is every weight in float32."""
    from crosstune.models import build
    from crosstune.models.numpy_weights import BAND, WORKERS

    spec = build.sized_spec("gemma4", "31b")
    monkeypatch.setattr(build, "available_bytes", lambda: 12 << 30)
    assert build.memory_problem(spec, "bfloat16", 16, "numpy") is None
    one = build.memory_problem(spec, "bfloat16", 1, "numpy")
    assert one is not None and "GB to build in bfloat16 in 1 shard(s) with the numpy writer" in one
    weights, embedding = 2 * (spec.total_params + spec.num_layers), 2 * spec.vocab_size * spec.hidden_size
    bands = WORKERS * BAND * 4  # each thread's float32 band
    assert build.build_bytes(spec, "bfloat16", 1, "numpy") == weights + embedding + bands  # the file + its largest
    assert build.build_bytes(spec, "bfloat16", 16, "numpy") < 7e9 < 122e9 < build.build_bytes(spec)


def test_the_numpy_writer_refuses_the_multimodal_layout_before_any_work(tmp_path):
    from crosstune.models.build_rules import ModelOptionError

    with pytest.raises(ModelOptionError, match="^--writer numpy writes --layout causal only: .* needs --writer torch$"):
        build_checkpoint("gemma4", tmp_path / "m", layout="multimodal", writer="numpy")
    assert not (tmp_path / "m").exists()


# A host with the jax-only install: `import torch` fails (as with requirements-jax.lock). The CLI builds the tiny
# Gemma 4 in the hub's dtype and shards; the jax loader reads it into tunix and computes logits; the multimodal
# layout and --writer torch are refused in one line each.
NO_TORCH = """
import json, sys
sys.modules["torch"] = None
from pathlib import Path
import numpy as np
from typer.testing import CliRunner
from crosstune.cli import _register, app

out, corpus = Path(sys.argv[1]), sys.argv[2]
_register()
build = ["model", "build", "--family", "gemma4", "--size", "tiny", "--corpus", corpus]
runs = {what: CliRunner().invoke(app, build + args) for what, args in [
    ("multimodal", ["--layout", "multimodal", "--out", str(out.parent / "mm")]),
    ("torch", ["--writer", "torch", "--out", str(out.parent / "t")]),
    ("build", ["--dtype", "bfloat16", "--shards", "2", "--out", str(out)]),
]}
print(json.dumps({what: [r.exit_code, r.output] for what, r in runs.items()}))
import jax.numpy as jnp
from crosstune.train.jax.loss import attention_mask
from crosstune.train.jax.model import build_model, make_mesh, mesh_context
mesh = make_mesh(1, 1)
model, _ = build_model("gemma4", out, mesh, dtype="float32")
tokens = np.load(out.parent / "tokens.npy")
positions, mask = jnp.arange(tokens.shape[1])[None], attention_mask(jnp.ones(tokens.shape, jnp.int32))
with mesh_context(mesh):
    logits, _ = model(jnp.asarray(tokens), positions, None, mask)
np.save(out.parent / "logits.npy", np.asarray(logits))
print("torch" in sys.modules and sys.modules["torch"] is not None)
"""


def test_model_build_without_torch_writes_what_the_jax_loader_reads(synth_corpus_dir, tmp_path):
    """The jax-only host's path end to end: `model build` (auto -> numpy, bf16, 2 shards) with torch unimportable,
    then tunix's logits of the checkpoint, in that process; they equal transformers' logits of the same files."""
    import torch
    import transformers

    tokens = np.random.default_rng(0).integers(3, 1000, size=(1, 40))  # past the sliding window (32)
    np.save(tmp_path / "tokens.npy", tokens)
    out = tmp_path / "m"
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(out), str(synth_corpus_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs, torch_seen = done.stdout.strip().splitlines()[-2:]
    runs = json.loads(runs)
    assert torch_seen == "False"
    code, output = runs["multimodal"]
    assert code == 1 and "error: --layout multimodal is built with transformers' model classes, which need torch: " in (
        " ".join(output.split())
    )
    assert "pip install -r requirements.lock" in output.replace("\n", " ")
    code, output = runs["torch"]
    assert code == 1 and "--writer torch: torch does not import here" in " ".join(output.split())
    code, output = runs["build"]
    assert code == 0, output
    assert "written by numpy" in output
    manifest = json.loads((out / ".crosstune-model.json").read_text())
    assert manifest["settings"]["writer"] == "numpy"
    assert {d for d, _ in _tensors(out).values()} == {"BF16"} and (out / "model.safetensors.index.json").is_file()
    model = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        want = model(torch.tensor(tokens), use_cache=False).logits.numpy()
    assert_logits_close(np.load(tmp_path / "logits.npy"), want, rel=2e-4)  # tests/train/jax/test_hf_parity's bound
