"""The JAX backend (Tunix + Qwix + Optax + Orbax + Grain), reached only through crosstune.train.backend's registry."""
