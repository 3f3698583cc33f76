"""`prepare_dataset`: recipe sources -> chat-formatted, tokenized, masked, length-checked, packed shards on disk."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from crosstune.data.bad_input import DataError, Ledger
from crosstune.data.conversation import Conversation, ConversationBuilder, prompt_target_warning
from crosstune.data.encode import ChatEncoder
from crosstune.data.packing import build_rows, fit_length
from crosstune.data.prepared import (
    FORMAT_VERSION,
    PreparedDataset,
    chat_template_hash,
    check_replaceable,
    data_hash,
    data_settings,
    is_preparation,
    load_prepared,
    load_tokenizer,
    prepared_dir,
    read_manifest,
    staleness,
    tokenizer_hash,
    write_prepared,
)
from crosstune.data.sources import read_split
from crosstune.data.stats import split_stats
from crosstune.families import get_family
from crosstune.fsutil import exclusive_lock, lock_path
from crosstune.recipe.schema import Recipe, Subsample

ENCODE_BATCH = 256  # conversations per render + tokenize call (the tokenizer batches in Rust)
Progress = Callable[[str, int, int], None]  # (split, records done, records total)


def prepare_dataset(
    recipe: Recipe,
    tokenizer=None,
    lenient: bool = False,
    force: bool = False,
    out_dir: Path | None = None,
    progress: Progress | None = None,
) -> PreparedDataset:
    """Prepare the recipe's data for both backends and return it.

    An up-to-date preparation at the destination is reused; a stale or foreign one is refused unless `force`.
    Strict (the recipe's `data.strict`, unless `lenient`): the first bad record raises DataError naming
    file:line, field and reason, and nothing is written. Lenient: bad records are skipped and counted in the stats.
    Length is a policy, not a defect: in either mode a record longer than data.max_seq_len is dropped (`drop`, or
    `truncate` when not one answer token fits) and counted under `dropped` in the stats and the manifest.
    """
    dest = (Path(out_dir) if out_dir else prepared_dir(recipe)).resolve()
    if dest.exists() and not dest.is_dir():
        raise DataError("", f"data.prepared_dir {dest} is not a folder: point it at a new folder or a preparation")
    hint = "wait for it to finish, then run again (its result is reused when it matches)"
    with exclusive_lock(lock_path(dest), f"the preparation {dest}", hint):
        return _prepare_locked(recipe, dest, tokenizer, lenient, force, progress)


def _prepare_locked(recipe, dest, tokenizer, lenient, force, progress) -> PreparedDataset:
    tokenizer = tokenizer or load_tokenizer(recipe)
    strict = recipe.data.strict and not lenient
    settings, tok_hash = data_settings(recipe), tokenizer_hash(tokenizer)
    if dest.exists() and any(dest.iterdir()) and not force:
        if not is_preparation(dest):
            check_replaceable(dest)  # names the files that are not a preparation's
        manifest = read_manifest(dest)
        reasons = staleness(manifest, settings, tok_hash)
        if manifest.get("lenient") != (not strict):
            reasons.append(f"it was prepared {'leniently' if manifest.get('lenient') else 'strictly'}")
        if reasons:
            raise DataError(
                str(dest), "a different preparation is already there: " + "; ".join(reasons), hint="--force replaces it"
            )
        return PreparedDataset(dest, manifest, reused=True)
    check_replaceable(dest)  # --force replaces only an earlier preparation, unchanged: said before any work

    family = get_family(recipe.model.family)
    if tokenizer.pad_token_id is None:
        raise DataError("model.path", "the tokenizer has no pad token: rows need one for padding")
    chat = family.chat
    control = [*tokenizer.all_special_tokens, chat.bos, chat.turn_start, chat.turn_end, *chat.extra_special]
    control += [t for t in (chat.thought_start, chat.thought_end) if t]
    builder = ConversationBuilder(recipe.data, tuple(dict.fromkeys(control)), bool(chat.thought_start))
    encoder = ChatEncoder(tokenizer, chat)

    splits, all_stats, warnings = {}, {}, []
    for split in dict.fromkeys(["train", *(s.split for s in recipe.data.sources)]):
        ledger = Ledger(strict)
        raw, blank = read_split(recipe, split, ledger)
        convs = [c for r in raw if (c := builder.build(r, ledger)) is not None]
        if warning := prompt_target_warning(convs, recipe.data, split):
            warnings.append(warning)
        sample = recipe.data.subsample if split == "train" else None
        convs, subsampled_out = _subsample(convs, sample)
        rows, wheres, lengths, figures = _encode_split(split, convs, encoder, ledger, recipe, tokenizer, progress)
        if split == "train" and not wheres:
            raise DataError("data.sources", "no training records left", hint=_why_empty(ledger, subsampled_out))
        splits[split] = (rows, wheres, lengths)
        all_stats[split] = split_stats(
            rows, lengths, ledger, subsampled_out=subsampled_out, blank_lines=blank, **figures
        )

    manifest = {
        "format_version": FORMAT_VERSION,
        "recipe_name": recipe.name,
        "family": family.name,
        "data_hash": data_hash(settings),
        "tokenizer_hash": tok_hash,
        "chat_template_sha256": chat_template_hash(tokenizer),  # what serving must render prompts with
        "data_settings": settings,
        "max_seq_len": recipe.data.max_seq_len,
        "packing": recipe.data.packing,
        "pad_id": int(tokenizer.pad_token_id),
        "lenient": not strict,
        # records the length policy left out, per split and reason (also in stats.json, with the first few named)
        "dropped": {name: dict(sorted(s["dropped"].items())) for name, s in all_stats.items()},
        "dtypes": {"input_ids": "int32", "loss_mask": "uint8", "segment_ids": "int32", "positions": "int32"},
        "mask_convention": "loss_mask[t] = 1: token t is a prediction target, predicted from tokens < t",
    }
    write_prepared(dest, splits, manifest, {"recipe": recipe.name, "splits": all_stats, "warnings": warnings})
    return PreparedDataset(dest, read_manifest(dest))


def _subsample(convs: list[Conversation], sample: Subsample | None) -> tuple[list[Conversation], int]:
    """A seeded subset, in source order (shuffling is the adapters' job)."""
    if sample is None or sample.size >= len(convs):
        return convs, 0
    keep = np.sort(np.random.default_rng(sample.seed).choice(len(convs), size=sample.size, replace=False))
    return [convs[i] for i in keep], len(convs) - sample.size


def _encode_split(split, convs, encoder, ledger, recipe, tokenizer, progress):
    data = recipe.data
    docs, truncated, wheres, lengths = [], [], [], []
    malformed: Counter = Counter()
    straddling = cut = untrained = 0
    for lo in range(0, len(convs), ENCODE_BATCH):
        drop_over = data.max_seq_len if data.truncation == "drop" else None
        for enc in encoder.encode(convs[lo : lo + ENCODE_BATCH], ledger, drop_over):
            if enc.min_tokens is not None:  # too long for certain, and never tokenized (a 50 MB record took minutes)
                lengths.append(enc.min_tokens)  # a lower bound: the length statistics stay "longer than max"
                reason = f"at least {enc.min_tokens} tokens (too long to tokenize), more than data.max_seq_len"
                ledger.drop(enc.where, "too_long", f"{reason} {data.max_seq_len}")
                continue
            lengths.append(len(enc.ids))
            fit = fit_length(enc.ids, enc.mask, data.max_seq_len, data.truncation)
            if fit == "too_long":
                reason = f"{len(enc.ids)} tokens, more than data.max_seq_len {data.max_seq_len}"
                ledger.drop(enc.where, "too_long", reason)
                continue
            if fit == "prompt_too_long":
                first = int(np.argmax(enc.mask))
                reason = f"the prompt alone is {first} tokens, data.max_seq_len is {data.max_seq_len}"
                ledger.drop(enc.where, "prompt_too_long", reason)
                continue
            ids, mask, was_cut = fit
            docs.append((ids, mask))
            truncated.append(was_cut)
            wheres.append(enc.where)
            cut += len(enc.ids) - len(ids)
            straddling += enc.straddling
            untrained += enc.untrained_turns
            malformed.update(enc.malformed)
        if progress:
            progress(split, min(lo + ENCODE_BATCH, len(convs)), len(convs))
    rows = build_rows(docs, truncated, data.max_seq_len, data.packing, int(tokenizer.pad_token_id))
    figures = {
        "malformed": malformed,
        "straddling": straddling,
        "truncated_tokens_cut": cut,
        "untrained_turns": untrained,
    }
    return rows, wheres, np.asarray(lengths, dtype=np.int32), figures


def _why_empty(ledger: Ledger, subsampled_out: int) -> str:
    left_out = ledger.skipped + ledger.dropped
    if left_out:
        return "every record was left out: " + ", ".join(f"{k} {v}" for k, v in left_out.items())
    return "the sources hold no records" if not subsampled_out else "check data.subsample"


def training_data(recipe: Recipe, tokenizer=None, *, may_prepare: bool = True) -> PreparedDataset:
    """The prepared data a training run uses: ONE rule for both backends.

    An up-to-date preparation is used whether it was made strictly or with `data prepare --lenient` (the run
    records which, and how many records were skipped: `data_provenance`); a stale one is refused. With none yet,
    this process prepares it per the recipe (data.strict) when it `may_prepare` (the only process of the run);
    otherwise it is refused with the command to run first."""
    dest = prepared_dir(recipe)
    if may_prepare and not (dest / "manifest.json").is_file():
        return prepare_dataset(recipe, tokenizer)
    return load_prepared(recipe, tokenizer)


def data_provenance(prepared: PreparedDataset) -> dict:
    """What run.json records about the data: where, which hash, and whether (and what) records were skipped."""
    figures = prepared.figures
    train = figures.splits.get("train") if figures is not None else None
    skipped, dropped = (train.skipped, train.dropped) if train is not None else ({}, {})
    return {
        "prepared_dir": str(prepared.path),
        "data_hash": prepared.manifest.get("data_hash"),
        # the template the rows were rendered with: export carries it on and `serve start` checks the served one
        "chat_template_sha256": prepared.manifest.get("chat_template_sha256"),
        "lenient": bool(prepared.manifest.get("lenient")),
        "skipped_records": int(sum(skipped.values())),
        "skipped_by_reason": skipped,
        "dropped_records": int(sum(dropped.values())),  # longer than max_seq_len (data.truncation), not bad
        "dropped_by_reason": dropped,
        "train_rows": len(prepared.split("train")),
        "warnings": list(figures.warnings if figures is not None else []),  # a system prompt the targets disobey...
    }


def lenient_note(provenance: dict) -> str | None:
    """The line a run prints when its data was prepared leniently (None when strict)."""
    if not provenance["lenient"]:
        return None
    reasons = ", ".join(f"{k} {v}" for k, v in provenance["skipped_by_reason"].items()) or "none"
    return (
        f"[data] {provenance['prepared_dir']} was prepared leniently: {provenance['skipped_records']} records "
        f"skipped ({reasons}); run.json records it under data"
    )
