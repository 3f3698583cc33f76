"""A compiled step as crosstune.train.jax.aot reports one, for the planner's report tests."""


def compiled_step(**changes):
    """A compiled 31B step on v5p-8 as crosstune.train.jax.aot reports one (figures made up, units real)."""
    from crosstune.planner.aot_report import CompiledStep
    from crosstune.units import GIB

    fields = dict(
        topology="v5p:2x2x1",
        device_kind="TPU v5",
        devices=4,
        layers=60,
        model_layers=60,
        micro_batch_tokens=3072,
        accumulation=8,
        argument_bytes=20 * 10**9,
        output_bytes=10**9,
        alias_bytes=10**9,
        temp_bytes=10**9,
        generated_code_bytes=0,
        flops=1e14,
        bytes_accessed=1e12,
        build_s=1.0,
        lower_s=1.0,
        compile_s=10.0,
        host_peak_rss_bytes=3 * GIB,
    )
    return CompiledStep(**(fields | changes))
