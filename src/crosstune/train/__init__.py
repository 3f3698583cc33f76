"""Training: one session above two backends (crosstune.train.session drives crosstune.train.backend's lifecycle);
the step plan, metrics and run-directory contract shared by both; the torch_* and jax_* backends."""
