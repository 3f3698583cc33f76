"""Training: one session above two backends (session.py drives backend.py's lifecycle with a RunContext); the
step plan, the shared initial LoRA, cross-backend parity; the backends in torch/ and jax/."""
