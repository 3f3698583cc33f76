"""Resumable JSONL cache of completions: an interrupted evaluation continues without asking again.

One line per completion, appended and flushed as soon as it arrives. The key covers everything that
changes the answer: the model by what it is, not where or under which name (the generator's `identity`: a
local model's files by fingerprint; a served model's name, and the files of the folder it serves when that folder
is on this machine; plus any revision the caller states, e.g. the study's export hash), problem, prompt hash,
sample index and the sampling parameters. A torn last line (a kill mid-write) is ignored on load. The file doubles
as a `--samples-file`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from crosstune.recipe.schema import EVAL_DEFAULTS
from crosstune.untrusted_files import UnreadableFile, jsonl_rows


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled; the defaults are the recipe's (EVAL_DEFAULTS). `n` is not part of the cache
    key: raising n reuses samples 0..n-1."""

    n: int = EVAL_DEFAULTS.samples
    temperature: float = EVAL_DEFAULTS.temperature
    top_p: float = EVAL_DEFAULTS.top_p
    max_tokens: int = EVAL_DEFAULTS.max_tokens
    seed: int = 0  # sample i is drawn with seed + i

    def key_fields(self) -> dict:
        fields = asdict(self)
        del fields["n"]
        return fields


def cache_key(model: dict, problem: str, prompt_hash: str, sample: int, params: SamplingParams) -> str:
    """`model`: the generator's identity (with the caller's revision), see the module doc."""
    blob = json.dumps([model, problem, prompt_hash, sample, params.key_fields()], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CompletionCache:
    """Completions by key, backed by an append-only JSONL file (safe to share between threads)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._records: dict[str, dict] = {}
        self._lock = threading.Lock()
        if self.path.exists():
            for _, record in jsonl_rows(self.path):  # a bad line (one torn by an interrupted write) is passed over
                if isinstance(record, dict) and isinstance(record.get("completion"), str) and "key" in record:
                    self._records[record["key"]] = record  # a completion that is not text is asked for again

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def put(self, record: dict) -> None:
        """Store a record (must hold `key` and `completion`) and append it to the file at once."""
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self._records[record["key"]] = record
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()


def load_samples_file(path: Path) -> dict[str, list[str]]:
    """Completions per problem from a JSONL file of {"problem", "completion"[, "sample"]} records
    (the completion cache has this shape). Samples are ordered by "sample" when present."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such samples file")
    found: dict[str, list[tuple[int, str]]] = {}
    for lineno, record in jsonl_rows(path):
        if record is None:
            continue
        if isinstance(record, UnreadableFile):
            raise record
        try:
            problem, completion = record["problem"], record["completion"]
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path}:{lineno}: expected a JSON object with problem and completion ({e})") from e
        rows = found.setdefault(problem, []) if isinstance(problem, str) else []
        sample = record.get("sample", len(rows))
        for name, value, ok, what in (
            ("problem", problem, isinstance(problem, str), "a string"),
            ("completion", completion, isinstance(completion, str), "a string"),
            ("sample", sample, type(sample) is int and sample >= 0, "an integer >= 0"),
        ):
            if not ok:
                raise ValueError(
                    f"{path}:{lineno}: {name} must be {what}, not {json.dumps(value)[:80]}: fix or drop that line"
                )
        rows.append((sample, completion))
    return {problem: [text for _, text in sorted(rows, key=lambda r: r[0])] for problem, rows in found.items()}


def samples_file_engines(path: Path) -> list[dict]:
    """The distinct engines named by a samples file's records (a completion cache names them; a file of bare
    {"problem", "completion"} records names none: one "unknown" engine)."""
    engines: list[dict] = []
    for _, record in jsonl_rows(path):
        if record is None or isinstance(record, UnreadableFile):
            continue
        engine = record.get("engine") if isinstance(record, dict) else None
        engine = engine if isinstance(engine, dict) else {"name": "unknown (not recorded)", "kind": "unknown"}
        if engine not in engines:
            engines.append(engine)
    return engines
