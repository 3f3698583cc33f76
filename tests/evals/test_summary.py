"""summary.json's generation block (how many samples were requested, completed, failed, taken from the cache) is read
typed with the rest of the summary (crosstune.evals.results.EvalSummary), its counts checked where they enter."""

from __future__ import annotations

import json

import pytest

from crosstune.errors import InputError
from crosstune.evals.evaluate import EvalReport
from crosstune.evals.results import evaluation_at

FAILED = {"problem": "p1", "sample": 1, "reason": "timed out"}
SUMMARY = {"problems": 2, "samples": 4, "pass_at_k": {"1": 0.5}}


def test_the_generation_block_is_typed_and_a_wrong_typed_count_is_refused_naming_the_file(tmp_path):
    generation = {"requested": 4, "completed": 3, "failed": 1, "failed_samples": [FAILED], "from_cache": 2}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({**SUMMARY, "generation": generation}))
    read = evaluation_at(path).summary.generation
    assert (read.requested, read.failed, read.from_cache, read.failed_samples[0].reason) == (4, 1, 2, "timed out")
    assert EvalReport({**SUMMARY, "generation": generation}, []).summary_record.generation == read
    path.write_text(json.dumps(SUMMARY))  # the references judged: no generation
    assert evaluation_at(path).summary.generation is None
    path.write_text(json.dumps({**SUMMARY, "generation": {**generation, "failed": "1"}}))
    with pytest.raises(InputError, match=rf"^{path}: generation.failed is '1', not a whole number >= 0$"):
        evaluation_at(path)
