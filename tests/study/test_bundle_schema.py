"""bundle.json is checked against one schema (crosstune.study.bundle_schema) wherever it is read: `study`
(which resumes from it) and `report` (which reads what it lists). Each wrong field is one line naming bundle.json and
the field, exit 1, no traceback, nothing written; no path in it reaches outside the bundle or into another one."""

from __future__ import annotations

import copy
import json
import os

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.study.bundle_schema import BundleError, check_manifest
from tests.helpers.paths import RECIPES

_register()
RUN = "runs/tiny-cpu-torch"
VALID = {
    "format": 1,
    "kind": "crosstune-study",
    "recipe": {"name": "tiny-cpu", "hash": "ab12", "resolved": "recipe.resolved.yaml", "overrides": ["a=1"]},
    "backend": "torch",
    "created": "2026-12-02T01:00:00+0000",
    "hosts": {"box": {"hostname": "box", "cpu": {"cores": 2}}},
    "stages": {
        "prepare": {
            "status": "done",
            "inputs": "f0",
            "inputs_format": 2,
            "seconds": 1.5,
            "note": "ok",
            "outputs": [{"path": "data", "sha256": "0" * 64, "skip": ["prepared_manifest.json"]}],
            "wrote": ["data/train/shard-0.npy"],
            "record": {},
        },
        "train": {
            "status": "stale",
            "was": "done",
            "stale": "prepare was redone after it",
            "outputs": [{"path": f"{RUN}/run.json", "sha256": "1" * 64}],
            "contents": {"runs": [RUN]},
        },
    },
    "contents": {"runs": [RUN], "evals": [], "sweeps": []},
}

# (the field, how it is broken, what the message says after "bundle.json: ")
BROKEN = [
    ("stages", [], "stages must be an object, not a list"),
    ("stages", None, "stages must be an object, not null"),
    ("stages.train", "done", "stages.train must be an object, not a string"),
    ("stages.train.status", "finished", "stages.train.status 'finished' is not one of done, skipped, running"),
    ("stages.train.status", None, "stages.train.status must be a string, not null"),
    ("stages.train.was", "gone", "stages.train.was 'gone' is not one of"),
    ("stages.train.outputs", f"{RUN}/run.json", "stages.train.outputs must be a list, not a string"),
    ("stages.train.outputs.0", {"sha256": "1"}, "stages.train.outputs[0].path is missing"),
    ("stages.prepare.outputs.0.skip", 3, "stages.prepare.outputs[0].skip must be a list, not an integer"),
    ("stages.prepare.outputs.0.sha256", None, "stages.prepare.outputs[0].sha256 must be a string, not null"),
    ("stages.prepare.seconds", "1.5", "stages.prepare.seconds must be a number, not a string"),
    ("stages.prepare.inputs_format", True, "stages.prepare.inputs_format must be an integer, not a boolean"),
    ("stages.train.contents", [RUN], "stages.train.contents must be an object, not a list"),
    ("stages.prepare.wrote", "data", "stages.prepare.wrote must be a list, not a string"),
    ("hosts", None, "hosts must be an object, not null"),
    ("hosts", ["box"], "hosts must be an object, not a list"),
    ("hosts.box", "box", "hosts.box must be an object, not a string"),
    ("contents", None, "contents must be an object, not null"),
    ("contents.runs", 3, "contents.runs must be a list, not an integer"),
    ("contents.runs", RUN, "contents.runs must be a list, not a string"),
    ("contents.evals", [7], "contents.evals[0] must be a string, not an integer"),
    ("backend", "tpu", "backend 'tpu' is not one of torch, jax"),
    ("recipe", "tiny-cpu", "recipe must be an object, not a string"),
    ("recipe.name", 1, "recipe.name must be a string, not an integer"),
    ("format", "1", "format must be an integer, not a string"),
    # paths: relative to the bundle and inside it
    ("stages.train.outputs.0.path", "/etc/passwd", "stages.train.outputs[0].path '/etc/passwd' is not a path inside"),
    ("stages.train.outputs.0.path", "../../etc", "stages.train.outputs[0].path '../../etc' is not a path inside"),
    ("contents.runs.0", "../other/runs/x", "contents.runs[0] '../other/runs/x' is not a path inside the bundle"),
    ("contents.runs.0", "runs/../../x", "contents.runs[0] 'runs/../../x' is not a path inside the bundle"),
    ("contents.runs.0", "", "contents.runs[0] '' is not a path inside the bundle"),
    ("recipe.resolved", "/tmp/r.yaml", "recipe.resolved '/tmp/r.yaml' is not a path inside the bundle"),
]
MISSING = [
    ("hosts", "hosts is missing"),
    ("stages", "stages is missing"),
    ("contents", "contents is missing"),
    ("stages.train.status", "stages.train.status is missing"),
]


def broken(field: str, value, *, drop: bool = False) -> dict:
    data, *keys = copy.deepcopy(VALID), *field.split(".")
    holder = data
    for key in keys[:-1]:
        holder = holder[int(key)] if isinstance(holder, list) else holder[key]
    last = int(keys[-1]) if isinstance(holder, list) else keys[-1]
    if drop:
        del holder[last]
    else:
        holder[last] = value
    return data


def refusals(bundle, manifest: dict) -> list[str]:
    """What `study` and `report` say of a bundle holding `manifest`; each must fail in one line and write nothing."""
    bundle.mkdir(exist_ok=True)
    text = json.dumps(manifest)
    (bundle / "bundle.json").write_text(text)
    held = sorted(p.name for p in bundle.iterdir())
    said = []
    runner = CliRunner()
    for args in (
        ["study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), "--only", "plan"],
        ["report", str(bundle), "--out", str(bundle.parent / "report")],
    ):
        result = runner.invoke(app, args, terminal_width=400)
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.output.count("\n") == 1, result.output
        said.append(result.output.strip())
    assert (bundle / "bundle.json").read_text() == text  # nothing written
    assert not (bundle.parent / "report").exists()
    assert sorted(p.name for p in bundle.iterdir()) == held
    return said


def test_the_valid_manifest_passes_the_schema(tmp_path):
    """The control: the same manifest, unbroken, is taken as is."""
    manifest = check_manifest(copy.deepcopy(VALID), tmp_path / "bundle.json")
    assert manifest.stages["train"].outputs[0].path == f"{RUN}/run.json"
    dumped = manifest.model_dump(mode="json", by_alias=True)  # as study.bundle.write_manifest writes it back
    assert dumped == {
        **VALID,
        "stages": {
            **VALID["stages"],
            "train": {**VALID["stages"]["train"], "contents": {"runs": [RUN], "evals": [], "sweeps": []}},
        },
    }


@pytest.mark.parametrize(("field", "value", "message"), BROKEN, ids=[f"{f}={v!r}" for f, v, _ in BROKEN])
def test_each_wrong_field_is_one_line_naming_bundle_json_and_the_field(tmp_path, field, value, message):
    bundle = tmp_path / "b"
    for said in refusals(bundle, broken(field, value)):
        assert said.startswith(f"error: {bundle / 'bundle.json'}: {message}"), said


@pytest.mark.parametrize(("field", "message"), MISSING)
def test_each_missing_field_is_one_line_naming_it(tmp_path, field, message):
    bundle = tmp_path / "b"
    for said in refusals(bundle, broken(field, None, drop=True)):
        assert said.startswith(f"error: {bundle / 'bundle.json'}: {message}: restore bundle.json"), said


def test_no_listed_path_leads_out_of_the_bundle_or_into_another_one(tmp_path):
    """`report` followed contents.runs into another bundle and presented that run as this one's."""
    bundle, other = tmp_path / "b", tmp_path / "other"
    (other / "runs" / "x").mkdir(parents=True)
    bundle.mkdir()
    os.symlink(other / "runs", bundle / "runs")
    link_out = broken("contents.runs.0", "runs/x")
    for said in refusals(bundle, link_out):
        assert (
            f"bundle.json: stages.train.outputs[0].path '{RUN}/run.json' leads out of the bundle (to {other}/runs/"
            "tiny-cpu-torch/run.json)" in said
        )
    (bundle / "runs").unlink()
    (bundle / "nested" / "runs" / "x").mkdir(parents=True)
    (bundle / "nested" / "bundle.json").write_text(json.dumps(VALID))
    with pytest.raises(BundleError, match=rf"contents.runs\[0\] 'nested/runs/x' is inside another bundle \({bundle}"):
        check_manifest(broken("contents.runs.0", "nested/runs/x"), bundle / "bundle.json")


def test_a_bundle_json_linked_out_of_the_bundle_is_not_read(tmp_path):
    """The manifest itself is a path under the bundle (crosstune.confinement): a link to another study's bundle.json
    was read as this folder's, by `study` (which then resumed into it) and by `report`."""
    bundle, other = tmp_path / "b", tmp_path / "other"
    other.mkdir()
    (other / "bundle.json").write_text(json.dumps(VALID))
    bundle.mkdir()
    (bundle / "bundle.json").symlink_to(other / "bundle.json")
    runner = CliRunner()
    for args in (
        ["study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), "--only", "plan"],
        ["report", str(bundle), "--out", str(tmp_path / "report")],
    ):
        result = runner.invoke(app, args, terminal_width=400)
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert f"{bundle}/bundle.json leads out of the bundle {bundle} (to {other}/bundle.json)" in result.output
    assert sorted(p.name for p in bundle.iterdir()) == ["bundle.json"] and not (tmp_path / "report").exists()
