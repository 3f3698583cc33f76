"""Compare runs, evaluations and serving sweeps: the cost model (`crosstune cost`) and the report (`crosstune report`).

Pure functions of run directories, evaluator outputs, bench summaries and the price catalog (crosstune.hardware),
in three rooms that import only downward: inputs/ (what is read, checked) ← cost/ ← report/.
Entry points for other code (the demo): `write_report(inputs, out_dir) -> Path`, `read_run`, `training_cost`,
`read_sweep`, `serving_costs`, `load_prices`, and the TCO types.
"""

from crosstune.compare.cost.costs import serving_costs, training_cost, what_if_serving, what_if_training
from crosstune.compare.cost.prices import CostError, PriceBook, load_prices
from crosstune.compare.cost.tco import Option, Workload, break_even
from crosstune.compare.inputs.run_summary import read_run
from crosstune.compare.inputs.sweep_summary import read_sweep
from crosstune.compare.report.writer import write_report

__all__ = [
    "CostError",
    "Option",
    "PriceBook",
    "Workload",
    "break_even",
    "load_prices",
    "read_run",
    "read_sweep",
    "serving_costs",
    "training_cost",
    "what_if_serving",
    "what_if_training",
    "write_report",
]
