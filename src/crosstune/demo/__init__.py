"""`crosstune demo`: the whole pipeline on a laptop CPU with a small real-architecture Gemma 4, no downloads
(context, stages, evaluation, serving stage, the family split, and the pretrained base it starts from)."""
