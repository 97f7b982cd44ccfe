"""One synthesis run on Ray, and the nightly runs built on it.

* `synthesis` - wires a run: source -> Ray Data -> search actors -> the run folder's sink;
* `stream` - the problems as a Ray Data stream (read task, resume filter);
  `stream_rows` - the rows that stream carries, declared once;
* `search_actor` - the Ray Data actor that searches many trees at once and grades them;
* `cluster` - joining or starting the Ray cluster;
* `live` - the live progress display; `summary` - the final totals of a run;
* `plan` - what a run would do (`--dry-run`), without Ray;
* `allocation` - the night allocator (pure): a probe tree per problem, then the rest of
  the night's tokens to the problems whose probes promise the most kept rows;
* `nightly` - the nightly ledger: each date's slice of the source, and its spend cap;
  `night_ledger` - the ledger's files: their schema, and the one reading (checked whole)
  that the dry run and the real run both plan from.
"""
