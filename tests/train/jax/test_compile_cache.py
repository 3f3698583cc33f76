"""The persistent compilation cache (crosstune.train.jax.config.use_compile_cache): each run's programs go to its own
folder even when one process trains several runs (jax opens its cache once per process), and a program compiled
again is read back from the folder instead of compiled."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from crosstune.train.jax.config import CACHE_ENV, use_compile_cache


def _compile(scale: float) -> None:
    jax.jit(lambda x: jnp.sin(x) * scale + jnp.cos(x)).lower(jnp.ones((256, 256))).compile()


def test_each_run_s_programs_go_to_its_own_folder_and_are_read_back(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    hits: list[str] = []

    def listen(event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    minimum = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.monitoring.register_event_listener(listen)
    try:
        first = use_compile_cache(tmp_path / "run-1" / "xla-cache")
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # these programs compile in ms
        _compile(1.0)
        kept = set(first.iterdir())
        second = use_compile_cache(tmp_path / "run-2" / "xla-cache")
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        _compile(2.0)
        assert kept and set(first.iterdir()) == kept and any(second.iterdir())  # nothing of run 2 in run 1's
        use_compile_cache(first)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.clear_caches()  # the in-memory caches: the next compile can only be found on disk
        _compile(1.0)
        assert hits  # read back from run 1's folder
    finally:
        from jax._src import monitoring
        from jax.experimental.compilation_cache import compilation_cache

        monitoring.unregister_event_listener(listen)
        compilation_cache.reset_cache()  # the rest of this process compiles without a persistent cache, as before
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", minimum)
