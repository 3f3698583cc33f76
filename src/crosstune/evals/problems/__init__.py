"""What is asked: the problem sets (VerilogEval v2 by problems.txt in problem_sets, RTLLM's design folders in rtllm,
both read into benchmark.Problem), the chat messages a problem is posed as (prompt_styles, with our in-context
examples), the named protocols a published number was measured under (protocols), and Verilog text with comments and
strings blanked (verilog_source). Imports nothing of generation/ or judge/."""
