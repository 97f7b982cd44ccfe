"""The paper's evaluation: methods x budgets x seeds, graded, with a report folder."""
