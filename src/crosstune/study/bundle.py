"""The study bundle: one self-describing folder, its manifest (bundle.json) and the hashes that let a rerun trust
what an earlier run left.

    BUNDLE/bundle.json            what ran where: hardware, versions, recipe and data hashes, each stage's status,
                                  time, inputs fingerprint and outputs (paths relative to the bundle, with sha256);
                                  a stage whose earlier stage was redone is "stale" (and out of `contents`)
    BUNDLE/recipe.resolved.yaml   the recipe as the study ran it (defaults filled in, --set applied)
    BUNDLE/data/                  the prepared data          BUNDLE/runs/NAME-BACKEND/  the run directory
    BUNDLE/plan/plan.json         the planner's verdict      BUNDLE/export/{adapter,merged}/
    BUNDLE/serve/                 vLLM's command and log     BUNDLE/bench/              the serving sweep
    BUNDLE/eval/finetune/         the evaluator's outputs    BUNDLE/cost/cost.json

Every manifest write replaces the file atomically (a reader, or a kill -9, sees the old or the new one).

A study writes only inside its own bundle, and only at the names above (`open_bundle`, through crosstune.ownership's
`claim`: bundle.json proves the folder a bundle; any other non-empty folder is refused, naming what is in it); a
user's file beside them is left alone. What
each stage writes there goes through that command's own writer, which proves its folder by its manifest
(crosstune.ownership).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.errors import InputError
from crosstune.fsutil import atomic_write_text
from crosstune.ownership import ResumedKind, claim
from crosstune.study.bundle_schema import (
    BUNDLE_MANIFEST,
    BundleManifest,
    Contents,
    OutputRecord,
    RecipeRef,
    read_bundle_manifest,
    tree_sha256,
)

FORMAT = 1
RESOLVED_RECIPE = "recipe.resolved.yaml"


class StudyError(InputError):
    """A study that can't go on as asked; the message says which stage, why, and what to do."""


def new_manifest(recipe_name: str, backend: str) -> BundleManifest:
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return BundleManifest(
        format=FORMAT,
        recipe=RecipeRef(name=recipe_name),
        backend=backend,
        created=created,
        hosts={},
        stages={},
        contents=Contents(),
    )


def read_manifest(bundle: Path) -> BundleManifest | None:
    """The bundle's manifest, None when there is none yet; a BundleError naming the field when the file is not one
    (study/bundle_schema.py: the types of every field, paths inside the bundle)."""
    return read_bundle_manifest(bundle)


# A bundle is resumed in place: bundle.json proves the folder a study's (crosstune.ownership.claim).
BUNDLE_FOLDER = ResumedKind("crosstune study", BUNDLE_MANIFEST, "study bundle", read_manifest)


def open_bundle(bundle: Path, recipe_name: str, backend: str) -> BundleManifest:
    """The manifest of the bundle a study of `recipe_name` on `backend` may write into at `bundle`: a new one for a
    new or empty folder, the earlier one of the same study; else a StudyError saying why (a folder that is not a
    bundle: naming what is in it)."""
    manifest = claim(bundle, BUNDLE_FOLDER, error=StudyError)
    if manifest is None:
        return new_manifest(recipe_name, backend)
    if manifest.backend != backend:
        raise StudyError(
            f"{bundle} holds a {manifest.backend} study: give --backend {manifest.backend} or another --out"
        )
    if manifest.recipe.name != recipe_name:
        raise StudyError(
            f"{bundle} holds a study of recipe {manifest.recipe.name!r}, not {recipe_name!r}: give another --out"
        )
    return manifest


def write_manifest(bundle: Path, manifest: BundleManifest) -> None:
    text = json.dumps(manifest.model_dump(mode="json", by_alias=True), indent=2, sort_keys=False)
    atomic_write_text(Path(bundle) / BUNDLE_MANIFEST, text + "\n")


def fingerprint(value: Any) -> str:
    """sha256 of a JSON-able value (sorted keys): a stage's inputs (the files among them already by
    fsutil.files_fingerprint)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Output:
    """One output of a stage: a file or folder inside the bundle, hashed when the stage finished."""

    rel: str  # relative to the bundle
    skip: tuple[str, ...] = ()  # names under it that change without changing the output (locks, caches)

    def record(self, bundle: Path) -> OutputRecord:
        return OutputRecord(
            path=self.rel, sha256=tree_sha256(bundle / self.rel, self.skip), skip=list(self.skip) if self.skip else None
        )
