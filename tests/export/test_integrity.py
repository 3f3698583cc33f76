"""A tampered run or base stops the export with a message naming the tensor/file, and leaves nothing behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from crosstune.export import ExportError, export_run
from crosstune.families import get_family
from crosstune.run.layout import RunDirError
from crosstune.train.jax.lora import qwix_to_lora
from tests.helpers.export import torch_run


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, tiny_gemma4_dir):
    return torch_run(tmp_path_factory.mktemp("clean") / "run", tiny_gemma4_dir, "gemma4", rank=4, alpha=8.0)


@pytest.fixture
def run(tmp_path, clean_run):
    """A private copy of the run (tests tamper with it)."""
    return Path(shutil.copytree(clean_run, tmp_path / "run"))


@pytest.fixture
def base(tmp_path, tiny_gemma4_dir):
    return Path(shutil.copytree(tiny_gemma4_dir, tmp_path / "base"))


def refuses(run: Path, to: str, match: str, **kwargs) -> None:
    out = run.parent / "out"
    with pytest.raises(ExportError, match=match):
        export_run(run, to, out, **kwargs)
    assert not out.exists(), "partial output left at the destination"
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(".out.")], "temp directory left behind"


def edit_adapter(run: Path, fn) -> None:
    path = run / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(path))
    fn(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def test_extra_lora_key_is_unconsumed(run):
    edit_adapter(
        run, lambda t: t.update({"base_model.model.model.layers.0.self_attn.q_proj.lora_E.weight": torch.ones(1)})
    )
    refuses(run, "merged", r"lora_E.weight. is not a lora_A/lora_B weight \(left unconsumed\)")


def test_lora_on_a_non_target_module(run):
    edit_adapter(
        run, lambda t: t.update({"base_model.model.model.layers.0.mlp.act_fn.lora_A.weight": torch.ones(4, 64)})
    )
    refuses(run, "adapter", r"model.layers.0.mlp.act_fn: not a LoRA target module")


def test_lora_a_without_b(run):
    edit_adapter(run, lambda t: t.pop("base_model.model.model.layers.2.mlp.up_proj.lora_B.weight"))
    refuses(run, "both", r"model.layers.2.mlp.up_proj has no lora_B")


def test_wrong_shape(run):
    key = "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"
    edit_adapter(run, lambda t: t.update({key: torch.zeros(48, 4)}))
    refuses(run, "merged", r"model.layers.1.self_attn.k_proj: lora_A \(4, 64\) / lora_B \(48, 4\) don't fit")


def test_missing_base_tensor(run, base):
    path = base / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["model.layers.2.self_attn.k_proj.weight"]
    save_file(tensors, str(path), metadata={"format": "pt"})
    refuses(run, "merged", r"target weight 'model.layers.2.self_attn.k_proj.weight' is missing", base=base)


def test_base_shape_differs(run, base):
    path = base / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.layers.4.mlp.down_proj.weight"] = torch.zeros(64, 96)
    save_file(tensors, str(path), metadata={"format": "pt"})
    refuses(run, "merged", r"model.safetensors: model.layers.4.mlp.down_proj.weight has shape \(64, 96\)", base=base)


def test_truncated_shard(run, base):
    path = base / "model.safetensors"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1000)
    refuses(
        run,
        "merged",
        r"model.safetensors: tensor '.*' ends at byte \d+ but the file has \d+ bytes \(truncated\)",
        base=base,
    )


def test_corrupt_header(run, base):
    path = base / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:16] = b"\xff" * 8
    path.write_bytes(bytes(data))
    refuses(run, "merged", r"model.safetensors: header is not valid JSON", base=base)


def test_base_of_another_family(run, tiny_gemma3_dir):
    refuses(run, "merged", r"a gemma3 model, not gemma4 \(the run trained gemma4", base=tiny_gemma3_dir)


def test_rank_alpha_unknown(run):
    meta = json.loads((run / "run.json").read_text())
    del meta["lora"]["alpha"]
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match=r"run.json: lora.alpha: field required"):  # the schema's reader
        export_run(run, "adapter", run.parent / "out")
    assert not (run.parent / "out").exists()


def test_adapter_disagrees_with_run_json(run):
    meta = json.loads((run / "run.json").read_text())
    meta["lora"]["alpha"] = 32.0
    (run / "run.json").write_text(json.dumps(meta))
    refuses(run, "merged", r"adapter_config.json: r=4 alpha=8.0, but run.json says rank=4 alpha=32.0")


def test_failure_mid_write_leaves_nothing(run, monkeypatch):
    import crosstune.export.merge as merge

    def boom(*args, **kwargs):
        raise ExportError("disk full (simulated)")

    monkeypatch.setattr(merge, "merge_band", boom)
    refuses(run, "both", "disk full")


def test_existing_output_needs_overwrite(run):
    out = run.parent / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    for overwrite in (False, True):  # --overwrite replaces exports only
        with pytest.raises(ExportError, match=r"not crosstune export's output: keep.txt \(no export_manifest.json"):
            export_run(run, "adapter", out, overwrite=overwrite)
    assert (out / "keep.txt").read_text() == "x" and sorted(p.name for p in out.parent.iterdir()) == ["out", "run"]
    earlier = run.parent / "earlier"
    export_run(run, "both", earlier)
    with pytest.raises(ExportError, match=f"--out {earlier} holds an earlier output of crosstune export: pass --over"):
        export_run(run, "adapter", earlier)
    export_run(run, "adapter", earlier, overwrite=True)
    assert (earlier / "adapter_model.safetensors").is_file() and not (earlier / "merged").exists()


def test_jax_params_unconsumed_or_incomplete():
    spec = get_family("gemma4").spec("tiny")
    ok = {
        "layers.0.mlp.up_proj.kernel_lora_a": np.zeros((64, 4)),
        "layers.0.mlp.up_proj.kernel_lora_b": np.zeros((4, 128)),
    }
    assert set(qwix_to_lora(ok, spec, rank=4, alpha=8.0).modules) == {"model.layers.0.mlp.up_proj"}
    with pytest.raises(ExportError, match=r"'layers.0.attn.foo_einsum.w_lora_a' is not a Qwix LoRA .* unconsumed"):
        qwix_to_lora({**ok, "layers.0.attn.foo_einsum.w_lora_a": np.zeros(1)}, spec, rank=4, alpha=8.0)
    with pytest.raises(ExportError, match=r"layers.1.mlp.down_proj.kernel: has lora_a only"):
        qwix_to_lora({**ok, "layers.1.mlp.down_proj.kernel_lora_a": np.zeros((128, 4))}, spec, rank=4, alpha=8.0)
    kv = {
        "layers.5.attn.kv_einsum.w_lora_a": np.zeros((64, 4)),
        "layers.5.attn.kv_einsum.w_lora_b": np.zeros((4, 2, 1, 64)),
    }
    with pytest.raises(ExportError, match=r"layers.5.attn.kv_einsum.w: gives a v LoRA, but layer 5 has no v"):
        qwix_to_lora(kv, spec, rank=4, alpha=8.0)  # a global k_eq_v layer has k_einsum, never kv_einsum


def test_the_export_manifest_is_read_typed_and_a_wrong_typed_source_is_refused_naming_the_file(tmp_path):
    from crosstune.export.export_folder import read_export_manifest
    from tests.helpers.export import write_export_manifest

    (tmp_path / "adapter_config.json").write_text("{}")
    path = write_export_manifest(tmp_path, "adapter", chat_template_sha256="c" * 64, step=7)
    manifest = read_export_manifest(tmp_path)
    assert (manifest.kind, manifest.source.step, manifest.source.chat_template_sha256) == ("adapter", 7, "c" * 64)
    assert manifest.files["adapter_config.json"].bytes == 2
    raw = json.loads(path.read_text())
    raw["source"]["step"] = "7"
    path.write_text(json.dumps(raw))
    with pytest.raises(ExportError, match=rf"^{path}: source.step: input should be a valid integer \(got '7'\)"):
        read_export_manifest(tmp_path)
    path.write_text(json.dumps({"kind": "adapter", "files": {}}))
    with pytest.raises(ExportError, match="its export_manifest.json is not crosstune export's; export the run again"):
        read_export_manifest(tmp_path)
