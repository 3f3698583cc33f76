"""Gemma 4: sizes and HF config (family.py), the HF <-> Tunix table (tunix.py), chat template."""

from __future__ import annotations

from crosstune.families.gemma4.family import GEMMA4, SIZES, make_spec

FAMILY = GEMMA4

__all__ = ["FAMILY", "GEMMA4", "SIZES", "make_spec"]
