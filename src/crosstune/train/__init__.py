"""Training: shared metrics and run-directory contract; backends in crosstune.train.torch_backend / jax_backend."""
