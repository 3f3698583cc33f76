"""The prepared dataset on disk: row shards as .npy (memory-mapped on read), a document table and a manifest.

Layout of a prepared directory:
    manifest.json                       format version, hashes (chat_template_sha256: the template rows were
                                        rendered with), counts, max_seq_len, dtypes
    stats.json, lengths.png             what `crosstune data stats` shows
    <split>/<shard>.<field>.npy         rows [R, max_seq_len]: input_ids int32, loss_mask uint8 (1 = target),
                                        segment_ids int32 (1..k per row, 0 = padding), positions int32
    <split>/docs.npz                    per document: doc_row, doc_start, doc_length, doc_truncated, doc_index
    <split>/records.json                per document (by doc_index): the record's source, "file:line"
    <split>/lengths.npy                 token length of every record before the length policy (histogram)
Hashes make a preparation refuse to load once the recipe's data settings, the source files or the tokenizer change.
manifest.json is also the folder's manifest in crosstune.ownership's one shape (made_by, created, files: sha256 and
size of every file): a preparation replaces only an earlier one, unchanged. One written before that shape (before
crosstune.FORMAT_EPOCH) is not crosstune's: prepared again into another folder, or once moved aside.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from crosstune import ownership
from crosstune.confinement import inside, listing
from crosstune.data.bad_input import DataError
from crosstune.data.packing import DOC_FIELDS, ROW_FIELDS, Rows
from crosstune.data.sources import fingerprint
from crosstune.data.stats import PreparedStats, save_stats
from crosstune.errors import validation_line
from crosstune.recipe.load import model_path, resolve_path
from crosstune.recipe.schema import Recipe
from crosstune.units import MIB
from crosstune.untrusted_files import read_json

FORMAT_VERSION = 1
SHARD_BYTES = 256 * MIB  # rows per shard are chosen so one shard's four arrays stay near this size
NOT_HASHED = ("strict", "prepared_dir")  # settings that change how we prepare, not what comes out


def prepared_dir(recipe: Recipe) -> Path:
    """`data.prepared_dir`, or `<output_dir>/data/<recipe name>`, relative to the recipe file."""
    if recipe.data.prepared_dir:
        return resolve_path(recipe, recipe.data.prepared_dir)  # type: ignore[return-value]
    return resolve_path(recipe, recipe.output_dir) / "data" / recipe.name  # type: ignore[operator]


def load_tokenizer(recipe: Recipe):
    """The tokenizer (with its chat template) of the recipe's model directory."""
    path = model_path(recipe)  # a hub id: its snapshot, fetched when online (crosstune.hub)
    if path is None:
        raise DataError("model.path", "data preparation needs the model directory: its tokenizer and chat template")
    if not (path / "tokenizer.json").is_file():
        raise DataError("model.path", f"no tokenizer.json in {path}", hint="point model.path at an HF model directory")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tokenizer_hash(tokenizer) -> str:
    """sha256 of the tokenizer (its tokenizer.json form) and its chat template."""
    payload = tokenizer.backend_tokenizer.to_str() + "\0" + (tokenizer.chat_template or "")
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def chat_template_hash(tokenizer) -> str:
    """sha256 of the chat template text alone (UTF-8); named templates (a dict) hash as sorted JSON."""
    template = tokenizer.chat_template or ""
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def data_settings(recipe: Recipe) -> dict:
    """Everything that decides the prepared tokens besides the tokenizer (what the data hash covers)."""
    data = {k: v for k, v in recipe.data.model_dump(mode="json").items() if k not in NOT_HASHED}
    return {"format_version": FORMAT_VERSION, "family": recipe.model.family, "data": data, "files": fingerprint(recipe)}


def data_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()


def staleness(manifest: dict, settings: dict, tok_hash: str) -> list[str]:
    """Why a preparation no longer matches the recipe and tokenizer (empty: it matches)."""
    reasons = []
    old = manifest.get("data_settings", {})
    if manifest.get("format_version") != FORMAT_VERSION:
        reasons.append(f"format version {manifest.get('format_version')} → {FORMAT_VERSION}")
    if old.get("family") != settings["family"]:
        reasons.append(f"model.family {old.get('family')} → {settings['family']}")
    before, now = _flatten(old.get("data", {}), "data"), _flatten(settings["data"], "data")
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            reasons.append(f"{key}: {before.get(key)!r} → {now.get(key)!r}")
    if old.get("files") != settings["files"]:
        reasons.append("the source files changed (paths, sizes or modification times)")
    if manifest.get("tokenizer_hash") != tok_hash:
        reasons.append("the tokenizer or its chat template changed")
    if "chat_template_sha256" not in manifest:
        reasons.append("it records no chat_template_sha256 (prepared by an older crosstune)")
    if not reasons and manifest.get("data_hash") != data_hash(settings):
        reasons.append("the data settings hash differs")
    return reasons


def _flatten(value, prefix: str) -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}"))
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


# --- the folder ---------------------------------------------------------------------------------------------------
LABEL = "data.prepared_dir"  # how refusals name the folder


PREPARED = ownership.OutputKind("crosstune data prepare", "manifest.json")


def is_preparation(folder: Path) -> bool:
    """`folder` holds a preparation's manifest (whether its files are unchanged is `check_replaceable`'s)."""
    return ownership.read_manifest(Path(folder), PREPARED)[0] is not None


def check_replaceable(dest: Path) -> None:
    """Before any work: a DataError naming the files when `dest` holds anything but an earlier preparation,
    unchanged (preparing replaces the folder whole)."""
    dest = Path(dest)
    if dest.is_dir() and any(dest.iterdir()) and (why := ownership.refusal(dest, PREPARED, LABEL)):
        raise DataError("", why)


def restamp_stats(folder: Path) -> None:
    """Record stats.json and lengths.png as they are now in the manifest (`data stats` rewrites them in place)."""
    ownership.restamp(Path(folder), PREPARED, ["stats.json", "lengths.png"])


# --- writing ----------------------------------------------------------------------------------------------------
def write_prepared(
    dest: Path, splits: dict[str, tuple[Rows, list[str], np.ndarray]], manifest: dict, stats: dict
) -> None:
    """Write every split, the stats and the manifest into a temporary folder, then swap it in: a failure leaves
    no partial preparation, and only an earlier preparation, unchanged, is replaced."""
    error = lambda why: DataError("", why)  # noqa: E731 - the message names the folder already
    with ownership.owned_output(dest, PREPARED, label=LABEL, error=error) as tmp:
        manifest["splits"] = {}
        for name, (rows, wheres, lengths) in splits.items():
            manifest["splits"][name] = _write_split(tmp / name, rows, wheres, lengths)
        save_stats(tmp, stats)
        ownership.write_manifest(tmp, PREPARED, manifest)


def _write_split(folder: Path, rows: Rows, wheres: list[str], lengths: np.ndarray) -> dict:
    folder.mkdir(parents=True)
    n_rows, row_len = rows.input_ids.shape
    per_shard = max(1, SHARD_BYTES // max(1, row_len * 13))  # 4 + 1 + 4 + 4 bytes per token
    shards = []
    for s, lo in enumerate(range(0, max(n_rows, 1), per_shard)):
        hi = min(n_rows, lo + per_shard)
        for name in ROW_FIELDS:
            np.save(folder / f"{s:05d}.{name}.npy", getattr(rows, name)[lo:hi])
        shards.append(hi - lo)
    np.savez(folder / "docs.npz", **{name: getattr(rows, name) for name in DOC_FIELDS})
    (folder / "records.json").write_text(json.dumps(wheres, ensure_ascii=False) + "\n")
    np.save(folder / "lengths.npy", lengths.astype(np.int32))
    non_pad = int(np.count_nonzero(rows.segment_ids))
    return {
        "rows": int(n_rows),
        "documents": len(rows.doc_row),
        "tokens": non_pad,
        "target_tokens": int(rows.loss_mask.sum(dtype=np.int64)),
        "shard_rows": shards,
    }


# --- reading ----------------------------------------------------------------------------------------------------
@dataclass
class PreparedSplit:
    """One split's rows, memory-mapped: `len()` rows of `row_length` tokens; `rows(indices)` gathers a batch."""

    folder: Path
    info: dict
    row_length: int
    _shards: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        n = len(self.info["shard_rows"])
        self._shards = [
            {name: np.load(self.folder / f"{s:05d}.{name}.npy", mmap_mode="r") for name in ROW_FIELDS} for s in range(n)
        ]
        self._starts = np.cumsum([0, *self.info["shard_rows"]])

    def __len__(self) -> int:
        return int(self.info["rows"])

    def rows(self, indices) -> dict[str, np.ndarray]:
        """Rows `indices` (any int sequence), as arrays [n, row_length] keyed by ROW_FIELDS."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"row index out of range for a split of {len(self)} rows")
        shard = np.searchsorted(self._starts, indices, side="right") - 1
        out = {
            name: np.empty((len(indices), self.row_length), dtype=self._shards[0][name].dtype) for name in ROW_FIELDS
        }
        for s in np.unique(shard):
            pick = np.nonzero(shard == s)[0]
            local = indices[pick] - self._starts[s]
            for name in ROW_FIELDS:
                out[name][pick] = self._shards[s][name][local]
        return out

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {name: value[0] for name, value in self.rows([index]).items()}

    @cached_property
    def docs(self) -> dict[str, np.ndarray]:
        with np.load(self.folder / "docs.npz") as z:
            return {name: z[name] for name in DOC_FIELDS}

    @cached_property
    def record_sources(self) -> list[str]:
        return read_json(self.folder / "records.json", PREPARE_HINT)

    @cached_property
    def raw_lengths(self) -> np.ndarray:
        return np.load(self.folder / "lengths.npy")


@dataclass
class PreparedDataset:
    """A prepared directory: its manifest, and each split as a PreparedSplit."""

    path: Path
    manifest: dict
    reused: bool = False  # prepare_dataset found this preparation up to date and did not redo it

    @property
    def splits(self) -> list[str]:
        return list(self.manifest["splits"])

    @property
    def max_seq_len(self) -> int:
        return int(self.manifest["max_seq_len"])

    @property
    def pad_id(self) -> int:
        return int(self.manifest["pad_id"])

    @property
    def chat_template_sha256(self) -> str:
        """sha256 of the chat template every prompt was rendered with (`chat_template_hash`)."""
        return str(self.manifest["chat_template_sha256"])

    def split(self, name: str = "train") -> PreparedSplit:
        if name not in self.manifest["splits"]:
            raise DataError(str(self.path), f"no {name!r} split (prepared: {', '.join(self.splits) or 'none'})")
        return PreparedSplit(self.path / name, self.manifest["splits"][name], self.max_seq_len)

    @property
    def stats(self) -> dict:
        """stats.json as data prepare wrote it, its figures checked ({} when the preparation has none)."""
        return self._stats()[0]

    @property
    def figures(self) -> PreparedStats | None:
        """stats.json typed (None: the preparation has none)."""
        return self._stats()[1]

    def _stats(self) -> tuple[dict, PreparedStats | None]:
        """stats.json and its figures typed as PreparedStats; a DataError refuses a file changed since the preparation,
        or names the file and the key whose value does not type (its figures are shown and plotted)."""
        path = self.path / "stats.json"
        if why := ownership.changed(self.path, PREPARED, "stats.json"):
            raise DataError(str(path), why, hint=REPREPARE_HINT)
        if not path.is_file():
            return {}, None
        stats = read_json(path, PREPARE_HINT)
        try:
            return stats, PreparedStats.model_validate(stats)
        except ValidationError as e:
            raise DataError(str(path), validation_line(e), hint=REPREPARE_HINT) from None


def read_manifest(path: Path) -> dict:
    """The preparation's manifest.json, once no link under the folder leads out of it (crosstune.confinement: every
    file of a preparation is read from inside the folder the recipe or the user named)."""
    for rel in listing(Path(path)) if Path(path).is_dir() else ():
        inside(path, rel, label="the prepared data", fix="remove the link, or prepare again with --force")
    manifest_path = Path(path) / "manifest.json"
    if not manifest_path.is_file():
        raise DataError(str(path), "no prepared data here (manifest.json is missing)", hint=PREPARE_HINT)
    manifest = read_json(manifest_path, PREPARE_HINT)
    if not isinstance(manifest, dict):
        raise DataError(str(manifest_path), "not a preparation's manifest (a JSON object)", hint=PREPARE_HINT)
    return manifest


PREPARE_HINT = "run `crosstune data prepare RECIPE`"
REPREPARE_HINT = "re-run `crosstune data prepare RECIPE --force`"


def open_prepared(path: Path) -> PreparedDataset:
    """A prepared directory as it is, without checking it against a recipe (for inspection: `data stats DIR`)."""
    return PreparedDataset(Path(path), read_manifest(path))


def load_prepared(recipe: Recipe, tokenizer=None, path: Path | None = None) -> PreparedDataset:
    """The recipe's prepared dataset, refused (DataError) when its hashes no longer match the recipe or tokenizer."""
    path = Path(path) if path else prepared_dir(recipe)
    manifest = read_manifest(path)
    settings = data_settings(recipe)
    reasons = staleness(manifest, settings, tokenizer_hash(tokenizer or load_tokenizer(recipe)))
    if reasons:
        raise DataError(
            str(path),
            "the prepared data is stale: " + "; ".join(reasons),
            hint="re-prepare with `crosstune data prepare RECIPE --force`",
        )
    return PreparedDataset(path, manifest)
