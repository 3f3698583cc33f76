"""Compare runs, evaluations and serving sweeps: the cost model (`crosstune cost`) and the report (`crosstune report`).

Pure functions of run directories, evaluator outputs, bench summaries and the price catalog (crosstune.hardware).
Entry points for other code (the demo): `write_report(inputs, out_dir) -> Path`, `read_run`, `training_cost`,
`read_sweep`, `serving_costs`, `load_prices`, and the TCO types.
"""

from crosstune.compare.cost import serving_costs, training_cost, what_if_serving, what_if_training
from crosstune.compare.prices import CostError, PriceBook, load_prices
from crosstune.compare.report import write_report
from crosstune.compare.runs import read_run
from crosstune.compare.sweeps import read_sweep
from crosstune.compare.tco import Option, Workload, break_even

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
