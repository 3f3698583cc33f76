"""What the cost model and the report read, each input checked where it enters: run directories (run_summary), serving
sweep summaries (sweep_summary), evaluation summaries (evaluations), study bundles and the sorting of paths by kind
(report_inputs), which run a sweep served (served_run), and the number checks with CostError (values). Imports
nothing of cost/ or report/."""
