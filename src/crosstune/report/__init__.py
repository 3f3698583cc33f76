"""The side-by-side report (`crosstune report`): what it reads, sorted by kind (inputs: runs, evaluations, sweeps,
study bundles), the document model and its Markdown (document) and HTML (html), the sections (training, serving,
TCO, evaluations), their charts, what may be compared (comparability, eval_groups, pairing), and the report's folder
(report_folder); `writer.write_report` assembles it."""
