"""How a completion is judged: code extraction (extract), the static screen of an untrusted design (screen), the
process sandbox and Landlock (sandbox, landlock), iverilog simulation against the testbench (simulate), the strict and
upstream-compatible verdicts (verdict), pass@k and the summaries (scoring), intervals and paired tests (significance).
Reads problems/; imports nothing of generation/."""
