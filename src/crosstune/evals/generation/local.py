"""A local transformers model as the evaluation's engine: prompts batched through one `generate` call.

Prompts are left-padded into one batch, so a batch costs about as much as its longest answer. Greedy decoding is
transformers' own. Sampling draws every row from its own torch.Generator seeded with `seed + sample index`, so a
sample is the same whichever others share its batch (transformers' sampler draws the whole batch from one global
stream, which would tie each sample to its batch-mates): RowSampler applies transformers' warpers (temperature,
the model's top_k or transformers' default 50, top_p, min_p: generate's order) and lets only the drawn token
through, and generate runs greedy on top of it. One prompt at a time this reproduces the unbatched sampler.
"""

from __future__ import annotations

import threading
from pathlib import Path

from crosstune.evals.generation.cache import SamplingParams
from crosstune.evals.generation.generate import Completion
from crosstune.evals.problems.prompt_styles import Message
from crosstune.fsutil import files_fingerprint

TRANSFORMERS_DEFAULT_TOP_K = (
    50  # GenerationConfig's documented default, which generate() applies when a model sets none
)
DEFAULT_BATCH_SIZE = 16  # docs/BENCHMARKS.md "Local generation": the demo model's throughput levels off near 16


def row_sampler(seeds: list[int], params: SamplingParams, generation_config):  # -> a transformers LogitsProcessor
    """A logits processor that samples each row from its own seeded generator (see the module doc)."""
    import torch
    from transformers import (
        LogitsProcessor,
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = []
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    top_k = getattr(generation_config, "top_k", None)
    top_k = TRANSFORMERS_DEFAULT_TOP_K if top_k is None else top_k
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=params.top_p))
    if getattr(generation_config, "min_p", None):
        warpers.append(MinPLogitsWarper(min_p=generation_config.min_p))

    class RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

        def __call__(self, input_ids, scores):
            for warper in warpers:
                scores = warper(input_ids, scores)
            probs = torch.softmax(scores.float(), dim=-1).cpu()
            picks = torch.stack([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
            only = torch.full_like(scores, float("-inf"))
            return only.scatter_(1, picks.to(scores.device), 0.0)

    return RowSampler()


class TransformersGenerator:
    """A local model through transformers (AutoModelForCausalLM + the tokenizer's chat template)."""

    max_concurrency = 1  # one generate() at a time; the model is not shared across threads

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = DEFAULT_BATCH_SIZE):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.model = str(model_path)
        # The weights by their files, not their path: a new model saved over the old one is asked again.
        folder = Path(model_path)
        self.identity = {"weights": files_fingerprint(folder)} if folder.is_dir() else {"model": self.model}
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.padding_side = "left"  # generation continues every row from its last prompt token
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.lm = AutoModelForCausalLM.from_pretrained(model_path).to(device).eval()
        self.device = device
        self.batch_size = max(1, batch_size)
        self.pad_id = self.tokenizer.pad_token_id
        self.engine = {"name": f"transformers {transformers.__version__}", "kind": "local",
                       "library": "transformers", "version": transformers.__version__, "torch": torch.__version__,
                       "device": device, "dtype": str(self.lm.dtype).removeprefix("torch."),
                       "batch_size": self.batch_size}  # fmt: skip
        self._lock = threading.Lock()

    def _eos_ids(self) -> list[int]:
        eos = self.lm.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]

    def _prompt(self, messages: list[Message]) -> tuple[list[int], bool]:
        """Token ids of the chat prompt, and whether the template itself opened a <think> the answer continues."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
        return list(ids), text.rstrip().endswith("<think>")

    def complete(self, messages: list[Message], params: SamplingParams, sample: int) -> Completion:
        return self.complete_batch([(messages, sample)], params)[0]

    def complete_batch(self, requests: list[tuple[list[Message], int]], params: SamplingParams) -> list[Completion]:
        """One generate() over every request (left-padded); completions in request order."""
        torch = self._torch
        prompts = [self._prompt(messages) for messages, _ in requests]
        batch = self.tokenizer.pad({"input_ids": [ids for ids, _ in prompts]}, padding=True, return_tensors="pt")
        options: dict = {"max_new_tokens": params.max_tokens, "pad_token_id": self.pad_id, "do_sample": False}
        if params.temperature > 0:
            seeds = [params.seed + sample for _, sample in requests]
            options["logits_processor"] = [row_sampler(seeds, params, self.lm.generation_config)]
        with self._lock, torch.no_grad():
            output = self.lm.generate(**batch.to(self.device), **options)
        new_tokens = output[:, batch["input_ids"].shape[1] :].tolist()
        eos = set(self._eos_ids())
        completions = []
        for row, (_, opened) in zip(new_tokens, prompts, strict=True):
            end = next((i + 1 for i, token in enumerate(row) if token in eos), None)
            text = self.tokenizer.decode(row[:end], skip_special_tokens=True)
            completions.append(Completion(("<think>" if opened else "") + text, "stop" if end else "length"))
        return completions

    def probe(self) -> None:
        """The model is loaded in this process: nothing to reach."""

    def cancel(self) -> None:
        """generate() cannot be cut short; its daemon thread ends with the process."""
