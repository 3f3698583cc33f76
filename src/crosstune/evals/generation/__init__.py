"""Completions for the problems: the OpenAI-compatible endpoint client (endpoint), the local transformers engine
(local), both behind one generate loop (generate), and the completion cache keyed by the model's identity (cache).
Reads problems/; imports nothing of judge/."""
