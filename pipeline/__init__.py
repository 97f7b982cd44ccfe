"""Sources, records, grading, Parquet sink and Hub publishing (next issues)."""
