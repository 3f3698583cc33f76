"""`crosstune demo`: a study per backend of the shipped demo recipe (crosstune.study, with its pretrain, parity and
eval-base stages), then `report` over the bundles. Only the demo's own choices live here: the held-out task kinds and
corpus sizes (split), the run of studies (runner), demo.json and the table it prints (figures); the recipe is
recipes/demo-cpu.yaml."""
