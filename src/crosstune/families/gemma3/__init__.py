"""Gemma 3: sizes and HF config (family.py), the HF <-> Tunix table (tunix.py), chat template."""

from __future__ import annotations

from crosstune.families.gemma3.family import GEMMA3, SIZES, make_spec

FAMILY = GEMMA3

__all__ = ["FAMILY", "GEMMA3", "SIZES", "make_spec"]
