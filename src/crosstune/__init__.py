"""crosstune: one LoRA fine-tuning recipe for Gemma on two stacks (PyTorch/TRL and JAX/Tunix)."""

__version__ = "0.1.0"
