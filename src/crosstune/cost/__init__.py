"""What things cost (`crosstune cost`): the price catalog with its overrides (prices), training and serving costs from
measured runs and sweeps or assumed speeds (costs), spot capacity with the work a preemption loses (spot), train +
serve totals and break-even (tco), a TCO workload file (tco_workload, served_run), and the seed's published figures
recomputed (source_study). Reads run directories (crosstune.run.run_summary) and sweeps (crosstune.servebench)."""
