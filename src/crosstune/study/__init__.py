"""`crosstune study`: the whole pipeline on one machine into one self-describing, resumable bundle (bundle.json),
through each area's public API: data, planner, train.session, export, serve, evals.runner, cost."""
