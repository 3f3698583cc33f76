"""A hub cache filled the way `hf download` leaves it, from folders built here (no network): blobs named by content
hash, `snapshots/<commit>/<file>` linking to them, `refs/<revision>` holding the commit. huggingface_hub's own
lookup (`snapshot_download(..., local_files_only=True)`) and `datasets` read it as they read a real one."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def put_in_hub_cache(cache: Path, repo_id: str, folder: Path, kind: str = "model", revision: str = "main") -> str:
    """Copy every file under `folder` into `cache` as hub repo `repo_id` (`kind` model or dataset) at `revision`;
    returns the commit (40 hex digits, from the files' names and contents)."""
    repo = Path(cache) / f"{kind}s--{repo_id.replace('/', '--')}"
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.name.startswith("."))
    blobs = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    commit = hashlib.sha1("".join(f"{f.relative_to(folder)}:{h}" for f, h in blobs.items()).encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for f, digest in blobs.items():
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(f, blob)
        link = repo / "snapshots" / commit / f.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return commit


def dataset_repo(out: Path, records: list[dict], config: str = "default") -> Path:
    """A dataset repo folder: `records` as data/train-00000-of-00001.parquet and a card whose `configs:` names it
    as config `config`'s train split (the layout `datasets` pushes to the hub)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (out / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), out / "data" / "train-00000-of-00001.parquet")
    card = f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: train\n    path: data/train-*\n---\n"
    (out / "README.md").write_text(card)
    return out
