"""What things cost: the price catalog with its overrides (prices), training and serving costs from measured runs and
sweeps or assumed speeds (costs), train + serve totals and break-even (tco), a TCO workload file (tco_workload), and
the seed's published figures recomputed (source_study). Reads inputs/; imports nothing of report/."""
