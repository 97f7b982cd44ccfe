"""The paper's evaluation: methods x budgets x seeds, graded, with a report folder.

`night_allocation` simulates a night of the simulated world, uniform B against the night
allocator (`pipeline.run.allocation`) at the same total tokens.
"""
