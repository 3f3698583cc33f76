"""`crosstune plan`: the planner's verdict (crosstune.planner), XLA's own for the compiled jax step, and the search
over remat, attention, rows and meshes with its compile cache (driver); cli parses and prints."""
