"""crosstune: one LoRA fine-tuning recipe for Gemma on two stacks (PyTorch/TRL and JAX/Tunix)."""

__version__ = "0.1.0"
# The format epoch: every file crosstune writes (run.json, metrics.jsonl, bundle.json, its outputs' manifests) is read
# back in the format this epoch writes. What development versions wrote before it is refused in one line naming the
# epoch (crosstune.errors.before_epoch), never converted: the command that wrote it writes it again.
FORMAT_EPOCH = "0.1.0"
