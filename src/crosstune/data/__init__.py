"""Data: synthetic corpora and the one prepared dataset both backends train on."""
