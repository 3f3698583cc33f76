"""Models and datasets named by hub id (`google/gemma-4-31B-it`), resolved through huggingface_hub's own cache.

A recipe's `model.path` or a data source's `path` may be a hub id instead of a folder. It resolves to the snapshot
folder of the hub cache (HF_HUB_CACHE, else HF_HOME/hub): `snapshots/<commit>/`, whose name is the commit recorded
in run.json and the study bundle. Only the files a run needs are fetched (a model's config, tokenizer and
safetensors; a dataset's data files and card). Offline (HF_HUB_OFFLINE=1) a cached id resolves and an uncached one is
a HubError saying the `hf download` line that fetches it; online a gated or missing repo is a HubError saying how to
get access. huggingface_hub does the lookup, the download and the cache layout; nothing here re-implements them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from crosstune.emit import shell_words
from crosstune.errors import CrosstuneError

# An owner and a name (huggingface_hub's repo-id rule, minus the bare legacy names a local folder could also be).
HUB_ID = re.compile(r"\A[A-Za-z0-9](?:[\w-]|\.(?!\.))*/[A-Za-z0-9_](?:[\w-]|\.(?!\.))*\Z")
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
    """Whether `value` has the shape of a hub id (owner/name); a folder at that path takes precedence (callers)."""
    return bool(HUB_ID.match(value)) and "--" not in value


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


def resolve(repo_id: str, kind: str, revision: str | None = None, *, fetch: bool = True,
            patterns: tuple[str, ...] | None = None) -> Snapshot:  # fmt: skip
    """`repo_id` at `revision` (default: main) as a folder of the hub cache.

    `fetch`: download what is missing when online (HF_HUB_OFFLINE unset); False looks in the cache only (a
    recipe check or an import never downloads). `patterns`: the files needed (default: MODEL_FILES or
    DATASET_FILES). Raises HubError with the one line to run (fetch, log in, fix the id)."""
    from huggingface_hub import constants

    patterns = patterns if patterns is not None else (MODEL_FILES if kind == "model" else DATASET_FILES)
    online = fetch and not constants.HF_HUB_OFFLINE
    folder = _snapshot(repo_id, kind, revision, online, patterns, constants.HF_HUB_CACHE)
    return Snapshot(repo_id, kind, Path(folder), Path(folder).name)


@functools.lru_cache(maxsize=64)
def _snapshot(repo_id: str, kind: str, revision: str | None, online: bool, patterns: tuple[str, ...],
              cache: str) -> str:  # fmt: skip
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
            repo_id, repo_type=kind, revision=revision, allow_patterns=list(patterns), cache_dir=cache,
            local_files_only=not online,
        )  # fmt: skip
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
        why = "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else ("the hub could not be reached" if online else
                                                                   "this step never downloads")  # fmt: skip
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


def files_root(folder: Path) -> Path:
    """The folder a model's files may resolve into (crosstune.confinement): a hub-cache snapshot's files are links
    into its repo's blobs (huggingface_hub's layout: REPO/snapshots/COMMIT/NAME -> ../../blobs/HASH), so the repo's
    folder; any other folder is its own root."""
    folder = Path(folder).resolve()
    repo = folder.parent.parent
    return repo if folder.parent.name == "snapshots" and (repo / "blobs").is_dir() else folder
