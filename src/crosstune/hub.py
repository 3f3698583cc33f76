"""Models and datasets named by hub id (`hf://google/gemma-4-31B-it`), resolved through huggingface_hub's own cache.

A recipe's `model.path` or a data source's `path` may be a hub id instead of a folder, and the one rule is what is
written: `hf://OWNER/NAME` (huggingface_hub's own URL scheme, HfFileSystem's) is a hub id, anything else a path. A
path that does not exist is refused as a path, never sent to the hub, where whoever owns that name would supply the
model or data. A revision is a commit hash or a ref name (`main`, `v1.0`, `refs/pr/3`), checked before the hub cache
is asked; the folder the cache resolves it to must be a commit's snapshot of that repo (a `refs/main` holding a path
loaded any folder and recorded its name as the commit). It resolves to the snapshot
folder of the hub cache (HF_HUB_CACHE, else HF_HOME/hub): `snapshots/<commit>/`, whose name is the commit recorded
in run.json and the study bundle. Only the files a run needs are fetched (a model's config, tokenizer and
safetensors; a dataset's data files and card). Offline (HF_HUB_OFFLINE=1) a cached id resolves and an uncached one is
a HubError saying the `hf download` line that fetches it; online a gated or missing repo is a HubError saying how to
get access. huggingface_hub does the lookup, the download and the cache layout; nothing here re-implements them.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from crosstune.confinement import inside
from crosstune.emit import shell_words
from crosstune.errors import CrosstuneError

HUB_SCHEME = "hf://"  # what makes a recipe's path a hub id
# An owner and a name (huggingface_hub's repo-id rule, validate_repo_id: ASCII letters, digits, '-', '_', '.', no
# '--' or '..', at most 96 characters; minus the bare legacy names without an owner).
HUB_ID = re.compile(r"\A(?=.{3,96}\Z)[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.))*/[A-Za-z0-9_](?:[A-Za-z0-9_-]|\.(?!\.))*\Z")
COMMIT = re.compile(r"\A[0-9a-f]{40}\Z")  # a snapshot folder's name: the commit's sha1
# A branch or tag (git check-ref-format's rules that matter here: no '..', no '//', no leading '/' or '-', no '.lock'
# at the end) or a pull request's ref, refs/pr/N; at most 255 characters
REVISION = re.compile(r"\A(?!.*\.\.)(?!.*//)(?!.*\.lock\Z)(?!.*/\Z)[A-Za-z0-9_][A-Za-z0-9_./-]{0,254}\Z")
REVISION_RULE = "a commit hash or a branch, tag or refs/pr/N name (letters, digits, '.', '_', '-', '/'; no '..')"
# What a run reads of a model repo: the config, the tokenizer with its chat template, the weights (huggingface_hub's
# patterns are fnmatch: `*` crosses folders). Not the original/ or *.bin copies of the weights some repos carry.
MODEL_FILES = ("*.json", "*.jinja", "tokenizer.model", "*.safetensors")
CONFIG_FILES = ("config.json",)
# What `datasets` reads of a dataset repo: the card (its `configs:` name the files of each config and split) and
# the data files.
DATASET_FILES = ("README.md", "*.json", "*.jsonl", "*.parquet", "*.arrow", "*.csv")


class HubError(CrosstuneError):
    """A hub id that can't be resolved: not cached while offline, gated, missing, or of an unknown revision."""


@dataclass(frozen=True)
class Snapshot:
    """A resolved hub id: the snapshot folder in the hub cache and the commit it holds."""

    repo_id: str
    kind: str  # "model" | "dataset"
    path: Path
    commit: str


def is_hub_id(value: str) -> bool:
    """Whether `value` has the shape of a bare hub id (owner/name), as a foreign tool's config names one."""
    return bool(HUB_ID.match(value)) and "--" not in value


def hub_id(value: str | None) -> str | None:
    """The hub id a recipe value names (`hf://OWNER/NAME` -> OWNER/NAME), None for a path; HubError when it is written
    as a hub id but is not one."""
    if value is None or not value.startswith(HUB_SCHEME):
        return None
    repo = value[len(HUB_SCHEME) :]
    if not is_hub_id(repo):
        rule = (
            "hf://OWNER/NAME, each part ASCII letters, digits, '-', '_' or '.' (no '--' or '..'), at most 96 characters"
        )
        raise HubError(f"{value!r} is not a hub id: {rule}")
    return repo


def hub_ref(repo_id: str) -> str:
    """How a recipe names the hub id `repo_id`."""
    return HUB_SCHEME + repo_id


def check_revision(revision: str | None) -> str | None:
    """`revision` when it is a commit hash or a ref name; HubError otherwise (before anything reads the cache)."""
    if revision is not None and not REVISION.match(revision):
        raise HubError(f"revision {revision!r}: not {REVISION_RULE}")
    return revision


def fetch_command(repo_id: str, kind: str, revision: str | None = None, patterns: tuple[str, ...] = ()) -> str:
    """The `hf download` line that puts `repo_id` (the files a run reads) into the hub cache."""
    parts = ["hf", "download", repo_id]
    if kind == "dataset":
        parts += ["--repo-type", "dataset"]
    if revision:
        parts += ["--revision", revision]
    for pattern in patterns:  # one --include per pattern: more words after one would read as file names
        parts += ["--include", pattern]
    return shell_words(parts)


def resolve(
    repo_id: str, kind: str, revision: str | None = None, *, fetch: bool = True, patterns: tuple[str, ...] | None = None
) -> Snapshot:
    """`repo_id` at `revision` (default: main) as a folder of the hub cache.

    `fetch`: download what is missing when online (HF_HUB_OFFLINE unset); False looks in the cache only (a
    recipe check or an import never downloads). `patterns`: the files needed (default: MODEL_FILES or
    DATASET_FILES). Raises HubError with the one line to run (fetch, log in, fix the id)."""
    from huggingface_hub import constants

    patterns = patterns if patterns is not None else (MODEL_FILES if kind == "model" else DATASET_FILES)
    repo_id = repo_id.removeprefix(HUB_SCHEME)
    if not is_hub_id(repo_id):
        raise HubError(f"{repo_id!r} is not a hub id (OWNER/NAME, ASCII, at most 96 characters)")
    check_revision(revision)
    online = fetch and not constants.HF_HUB_OFFLINE
    folder = Path(_snapshot(repo_id, kind, revision, online, patterns, constants.HF_HUB_CACHE))
    _check_snapshot(folder, repo_id, kind, revision, Path(constants.HF_HUB_CACHE))
    return Snapshot(repo_id, kind, folder, folder.name)


def _check_snapshot(folder: Path, repo_id: str, kind: str, revision: str | None, cache: Path) -> None:
    """HubError unless `folder` is a commit's snapshot folder of `repo_id` in the cache (CACHE/KINDs--OWNER--NAME/
    snapshots/COMMIT, no link on the way): huggingface_hub joins what a ref file holds onto snapshots/."""
    repo = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    where = f"hub {kind} {repo_id}" + (f" at revision {revision}" if revision else "")
    ok = folder.parent == repo / "snapshots" and COMMIT.match(folder.name) is not None
    if ok and not folder.is_symlink() and folder.resolve().parent == (repo / "snapshots").resolve():
        label, fix = f"the hub cache's {kind} {repo_id}", f"remove {repo} and fetch it again"
        for _, path in snapshot_files(folder):  # each a link into the repo's blobs, never out of the repo
            inside(repo, path, label=label, fix=fix, error=HubError)
        return
    ref = repo / "refs" / (revision or "main")
    fetch = fetch_command(repo_id, kind, revision)
    raise HubError(
        f"{where}: the hub cache resolves it to {folder}, not a commit's snapshot of {repo} (is {ref} "
        f"damaged?): remove {repo} and fetch it again with `{fetch}`"
    )


@functools.lru_cache(maxsize=64)
def _snapshot(
    repo_id: str, kind: str, revision: str | None, online: bool, patterns: tuple[str, ...], cache: str
) -> str:
    """One lookup (and at most one download) per process for the same request: a study asks many times."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"hub {kind} {repo_id}" + (f" at revision {revision}" if revision else "")
    get = fetch_command(repo_id, kind, revision, patterns)
    try:
        return snapshot_download(
            repo_id,
            repo_type=kind,
            revision=revision,
            allow_patterns=list(patterns),
            cache_dir=cache,
            local_files_only=not online,
        )
    except GatedRepoError:
        raise HubError(
            f"{what} is gated: accept its terms at {_page(repo_id, kind)} with your account, then log in here with "
            "`hf auth login` (or set HF_TOKEN) and run again"
        ) from None
    except RevisionNotFoundError:
        raise HubError(f"{what}: no such revision (a branch, tag or commit of {_page(repo_id, kind)})") from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{what}: no such repo, or it is private: check the id at {_page(repo_id, kind)}; for a private repo "
            "log in with `hf auth login` (or set HF_TOKEN)"
        ) from None
    except LocalEntryNotFoundError:
        why = (
            "HF_HUB_OFFLINE=1"
            if constants.HF_HUB_OFFLINE
            else ("the hub could not be reached" if online else "this step never downloads")
        )
        raise HubError(f"{what} is not in the hub cache ({cache}) and {why}: fetch it with `{get}`") from None
    except HfHubHTTPError as e:
        raise HubError(f"{what}: the hub answered {e.response.status_code}: retry, or fetch it with `{get}`") from None


def _page(repo_id: str, kind: str) -> str:
    from huggingface_hub import constants

    return f"{constants.ENDPOINT}/{'datasets/' if kind == 'dataset' else ''}{repo_id}"


def cached_model_config(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` when its config.json is there (None otherwise): never downloads."""
    try:
        snap = resolve(repo_id, "model", revision, fetch=False, patterns=CONFIG_FILES)
    except HubError:
        return None
    return snap.path if (snap.path / "config.json").is_file() else None


def snapshot_files(folder: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of every entry under a snapshot folder, its file links included (not followed), folder
    links not entered."""
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not (Path(here) / d).is_symlink()]
        found += [(str((Path(here) / n).relative_to(folder)), Path(here) / n) for n in sorted(files + dirs)]
    return found


def files_root(folder: Path) -> Path:
    """The folder a model's files may resolve into (crosstune.confinement): a hub-cache snapshot's files are links
    into its repo's blobs (huggingface_hub's layout: REPO/snapshots/COMMIT/NAME -> ../../blobs/HASH), so the repo's
    folder; any other folder is its own root."""
    folder = Path(folder).resolve()
    repo = folder.parent.parent
    return repo if folder.parent.name == "snapshots" and (repo / "blobs").is_dir() else folder
