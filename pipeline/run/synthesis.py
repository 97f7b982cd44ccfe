"""Wires one synthesis run: source -> Ray Data -> search actors -> Parquet (-> Hub).

    source (a Ray Data read task streams the selection: `pipeline.run.stream`)
      -> resume filter (committed problem_ids dropped, read in a Ray Data actor)
      -> one problem per block -> map_batches(SearchActor, ActorPoolStrategy)
         (one problem per call, trees_per_actor calls running at once in each actor)
      -> each finished tree committed to the run folder's sink as it streams in

With the night allocator (`allocation.enabled`, `pipeline.run.allocation`) the search
stage searches probes, and two stages follow it before the commits:

      -> map_batches(WindowStage)   one actor: files the probes by window, allocates each
                                    complete window, adds its second trees
                                    (`pipeline.run.window_stage`)
      -> map_batches(SearchActor)   a second pool: searches the second trees (a probe's
                                    result passes through)

and the driver commits a second tree after the probes its window was allocated from
(`SecondTrees`).

The rows between the stages are declared in `pipeline.run.stream_rows`; the run folder
(`pipeline.store.run_folder.RunFolder`) is opened once here and handed on.

The driver never holds the selection: it checks the source config and counts the
selection (`sources.check_source`, streaming, stops after skip + limit records), then
commits and counts what the stream hands it.

With `max_wall_s` the run stops at its wall-time cap (`pipeline.run.wall`): no tree starts
after it, trees still in flight after its grace are abandoned uncommitted, and the run
commits, reports and returns what it has, counting the problems it left (`stopped`).

The policy and scorer are Serve deployments started here and shared by every
actor.  Actors restart on failure and their tasks are retried, so a dead
actor's problems are redone; the sink's resume logic keeps rows unique.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from actors.errors import EngineError
from common.redact import install_log_redaction, redact_secrets, redact_text
from pipeline.config import RunConfig
from pipeline.errors import EmptySelection, InputError, OutputFullError, OutputLocationError
from pipeline.problems.sources import check_source
from pipeline.records import SCHEMAS
from pipeline.report.clamped_answers import (
    CLAMPED_KEY,
    ClampedAnswers,
    clamped_as_json,
    clamped_from_board,
    clamped_from_manifest,
    merge_clamped,
)
from pipeline.report.engine_reads import engine_reads
from pipeline.report.row_cost import COLUMNS_READ, COST_PER_ROW_KEY, cost_per_row
from pipeline.report.run_report import REPORT_FILES, REPORT_MD, write_run_report
from pipeline.run.allocation_report import ALLOCATION_KEY, allocation_markdown, allocation_summary
from pipeline.run.allocation_report import COLUMNS as ALLOCATION_COLUMNS
from pipeline.run.cluster import on_head_node, quiet_ray, start_ray
from pipeline.run.gpu_hours import GPU_HOURS_KEY, gpu_shape, rows_per_gpu_hour
from pipeline.run.interrupt import raise_if_interrupted
from pipeline.run.live import LiveProgress
from pipeline.run.metrics import RunMetrics
from pipeline.run.plan import check_engines
from pipeline.run.stream_rows import StreamResult, results_of
from pipeline.run.summary import RunSummary
from pipeline.run.wall import WallCap
from pipeline.store import request_log
from pipeline.store.filesystem import (
    check_reachable,
    describe_os_error,
    is_remote,
    is_storage_error,
    out_of_space,
)
from pipeline.store.lease import Lease
from pipeline.store.run_folder import MANIFEST, RunFolder
from pipeline.store.sink import ParquetSink

ProgressTarget = TextIO | Literal["stderr"] | None


def write_manifest(config: RunConfig, folder: RunFolder, **extra: Any) -> None:
    """`run.json`: the config that produced the run (secrets redacted), for `publish` later."""
    folder.write_manifest(
        {
            "run_id": config.resolved_run_id,
            "written_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "config": redact_secrets(config.model_dump(mode="json")),
            **extra,
        }
    )


def synthesize(
    config: RunConfig,
    *,
    progress: ProgressTarget = "stderr",
    progress_every_s: float = 10.0,
    verbose: bool = False,
    wall_cap: WallCap | None = None,
) -> RunSummary:
    """Run the whole synthesis job for `config`; returns the summary.

    `progress`: where the live display goes (`pipeline.run.live`; a terminal gets a panel
    redrawn in place, anything else a plain line every `progress_every_s` seconds);
    None is silent.  `verbose` keeps Ray's own progress bars and INFO logs.  `wall_cap`:
    the cap of a job that began earlier (a nightly job's, across its invocations); by
    default `max_wall_s` counts from this call.
    """
    start = time.perf_counter()
    if wall_cap is None:
        wall_cap = WallCap.start(config)
    install_log_redaction()
    run_id = config.resolved_run_id
    selection = check_source(config.source)  # config errors: one line, before any work
    check_engines(config)  # a missing engine package or model file: the same, before Ray
    if not selection and not config.allow_empty:
        raise EmptySelection(f"source: the selection is empty ({_describe(config)})")
    folder = RunFolder.open(config.output_root, run_id)
    check_reachable(folder.store, config.output_root)  # a missing bucket: one line, no work
    try:
        with folder.lease() as lease:
            return _synthesize(
                config,
                folder,
                lease,
                selection,
                start,
                progress=progress,
                progress_every_s=progress_every_s,
                verbose=verbose,
                wall_cap=wall_cap,
            )
    except Exception as exc:
        reason = out_of_space(exc)
        if reason is not None and _writing_output(exc, config.output_root):
            # exit 2: make room and rerun; every committed tree is kept
            raise disk_full(config, folder, selection, reason, exc) from exc
        # The output root is the only place this process writes (read-only, no access).
        filename = str(getattr(exc, "filename", None) or "")
        if isinstance(exc, OSError) and filename.startswith(str(Path(config.output_root))):
            raise OutputLocationError(
                f"output_root {config.output_root}: cannot write {filename}: {exc.strerror or exc}"
            ) from exc
        # a bucket failing mid-run after retries (botocore's own errors included)
        if is_remote(str(config.output_root)) and is_storage_error(exc):
            raise OutputLocationError(describe_os_error(config.output_root, exc)) from exc
        raise


# Room for run.json and the run report when no report is in the run folder yet: a small
# run's are 6.8 KiB and five PNGs of 34-61 KiB (measured 2026-11-25), doubled.
REPORT_ALLOWANCE = 512 * 1024


def disk_full(
    config: RunConfig, folder: RunFolder, selection: int, reason: str, exc: BaseException
) -> OutputFullError:
    """One line for a full output root: the root, the file, and the free space to make.

    The estimate: the problems of the selection whose tree is not committed yet, times
    what one tree takes on disk (the batch that did not fit, or the committed trees'
    average when that is more), plus run.json and the report (what they take now, or
    `REPORT_ALLOWANCE` before the first report).
    """
    root = config.output_root
    path = exc.path if isinstance(exc, OutputFullError) else getattr(exc, "filename", None)
    batch = exc.needed_bytes if isinstance(exc, OutputFullError) else 0
    try:
        used, trees = folder.disk_usage()
        extra = _report_bytes(folder)
    except OSError:  # only for the estimate: the batch alone then
        used, trees, extra = 0, 0, REPORT_ALLOWANCE
    average = used // trees if trees else 0
    per_tree = max(batch, average)
    where = _under(path, root) if path else f"the run folder {_under(folder.location, root)}"
    if not per_tree:
        estimate = (
            f"free at least {_size(extra)} there (run.json and the report; a tree's size is "
            "not known before the first one is committed)"
        )
    else:
        remaining = max(1, selection - trees)
        basis = "the batch that did not fit" if batch >= average else f"the {trees} trees' average"
        estimate = (
            f"free about {_size(remaining * per_tree + extra)} there (estimate: {remaining} "
            f"problems not yet written x {_size(per_tree)} per tree, {basis}, plus "
            f"{_size(extra)} for run.json and the report)"
        )
    return OutputFullError(
        f"output_root {root}: {reason} writing {where}; {estimate} and rerun the same "
        "command to resume; every committed tree is kept",
        path=str(path or ""),
        needed_bytes=batch,
        reason=reason,
    )


def _writing_output(exc: BaseException, root: str | Path) -> bool:
    """Did `exc` come from a write under the output root?  Our writes there say so
    (`OutputFullError`); an `OSError` of this process without a file name (the lease,
    written in the run folder) or naming one under the root does too.  A Ray error that
    carries an ENOSPC (Ray's own temp folder full) is not the output root's."""
    if isinstance(exc, OutputFullError):
        return True
    if any(c.__module__.startswith("ray") for c in type(exc).__mro__):
        return False
    filename = getattr(exc, "filename", None)
    return filename is None or str(filename).startswith(str(Path(root)))


def _report_bytes(folder: RunFolder) -> int:
    """What run.json and the report take in the run folder now (or the allowance)."""
    if folder.remote:
        return 0
    run_dir = folder.store.local_path
    files = [run_dir / "run.json", *(p for p in run_dir.iterdir() if p.name.endswith(REPORT_FILES))]
    if not (run_dir / REPORT_MD).exists():
        return REPORT_ALLOWANCE
    return sum(p.stat().st_blocks * 512 for p in files if p.is_file())


def _under(path: Any, root: str | Path) -> str:
    """`path` relative to the output root when it lies under it (the line names the root)."""
    text, base = str(path), str(root).rstrip("/") + "/"
    return text.removeprefix(base) if text.startswith(base) else text


def _size(n: int) -> str:
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _describe(config: RunConfig) -> str:
    source = config.source
    where = getattr(source, "path", None) or getattr(source, "name", None) or source.kind
    parts = [f"{source.kind} {where}"]
    if source.filters:
        parts.append(f"filters {source.filters}")
    if source.skip or source.limit is not None:
        parts.append(f"skip {source.skip}, limit {source.limit}")
    return "; ".join(parts) + "; set allow_empty: true if that is expected"


def _synthesize(
    config: RunConfig,
    folder: RunFolder,
    lease: Lease,
    selection: int,
    start: float,
    *,
    progress: ProgressTarget,
    progress_every_s: float,
    verbose: bool,
    wall_cap: WallCap | None,
) -> RunSummary:
    """The run under its lease: start Ray and the engines, search the selection and
    commit each tree as it lands, then sweep the request logs and write the report."""
    import ray

    from actors.progress import BOARD_NAME, ProgressBoard
    from actors.serve import deploy_services
    from pipeline.run.search_actor import SearchActor  # imports Ray Serve: only when searching
    from pipeline.run.stream import problem_stream

    run_id = config.resolved_run_id
    sink = ParquetSink(folder, lease)  # every commit fenced by the lease (`LeaseLost`)
    request_log.clean_done(folder.store, folder.searched_problem_ids)
    # Logs exist only with replay on, or left by an earlier attempt that had it on: with
    # neither, a committed tree has no log to clean (no listing per tree on a bucket).
    logged = config.replay.enabled or bool(request_log.logged_trees(folder.store))
    summary = RunSummary(run_id, folder.location)
    # what earlier invocations of this run recorded: run.json keeps the run's total
    summary.clamped = _earlier_clamped(folder)
    if summary.clamped:  # kept in run.json while this invocation runs
        write_manifest(config, folder, summary={CLAMPED_KEY: clamped_as_json(summary.clamped)})
    else:
        write_manifest(config, folder)
    summary.problems = selection
    # the rows earlier invocations wrote: rows per GPU-hour counts this one's only
    rows_before = folder.counts() if gpu_shape(config) is not None else {}
    if selection:
        if not verbose:
            quiet_ray()
        start_ray(config.ray_num_cpus, quiet=not verbose)
        try:
            deploy_services(config.policy, config.scorer)
        except EngineError as exc:
            # a replica's engine refused its config (a checkpoint changed since the check
            # before Ray started): the same one line and exit status as that check's
            if exc.field is None:
                raise
            raise InputError(str(exc)) from exc
        # Live counters: the search actors push to this board while their trees run.
        board_name = f"{BOARD_NAME}-{uuid.uuid4().hex[:8]}"
        board: Any = (
            ray.remote(num_cpus=0)(ProgressBoard)
            .options(name=board_name, **on_head_node())
            .remote()
        )
        # Live metrics on Ray's Prometheus endpoint (`pipeline.run.metrics`), fed from the
        # board and from each commit below
        metrics = RunMetrics.for_run(config)
        metrics.select(selection)
        poller = metrics.poll(lambda: ray.get(board.snapshot.remote(), timeout=10))
        allocation = config.allocation.enabled
        problems = problem_stream(config.source, config.output_root, run_id, allocation)
        dataset = search_stage(problems, config, SearchActor, board_name, wall_cap=wall_cap)
        if allocation:  # the probes' windows, then the second trees (`window_stage`)
            dataset = search_stage(
                window_stage(dataset, config, selection),
                config,
                SearchActor,
                board_name,
                wall_cap=wall_cap,
            )
        live = _live_progress(board, config, selection, progress, progress_every_s)
        try:
            _commit_stream(dataset, sink, summary, folder, logged, live, metrics)
            _record_board(summary, board, config)
        finally:
            poller.stop()  # after a last read of the board's counts
            if live is not None:
                live.stop()
            ray.kill(board)
    # a Ctrl-C whose KeyboardInterrupt was dropped on the way: no report of a run that
    # was stopped (the rerun writes it)
    raise_if_interrupted()
    if config.compact:
        _compact(folder, lease)
    _finish_run(config, folder, summary, start, rows_before)
    return summary


def _compact(folder: RunFolder, lease: Lease) -> None:
    """Merge the run's parts into shards (`pipeline.store.compaction`) under the run's own
    lease, before the report reads them.  Every run that reached its end compacts, failed
    searches or not: a rerun writes its batches next to the shards and compacts again, and
    until then every reader pays for thousands of files.  A failure is a warning: the
    folder reads as before (compaction is crash-safe) and `bgmcts compact` finishes it."""
    from pipeline.store.compaction import compact_run

    try:
        compact_run(folder, lease)
    except Exception as exc:
        print(
            f"warning: the run folder was not compacted ({redact_text(exc)}); every row is "
            f"committed, `bgmcts compact --run-dir {folder.location}` compacts it",
            file=sys.stderr,
        )


def _live_progress(
    board: Any,
    config: RunConfig,
    selection: int,
    progress: ProgressTarget,
    progress_every_s: float,
) -> LiveProgress | None:
    """The live display, already begun, reading the board's counters; None when silent."""
    import ray

    if progress is None:
        return None
    live = LiveProgress(
        lambda: dict(ray.get(board.snapshot.remote(), timeout=10)),
        total=selection,
        budget=config.budget,
        file=sys.stderr if progress == "stderr" else progress,
        every_s=progress_every_s,
    )
    live.begin()
    return live


def _commit_stream(
    dataset: Any,
    sink: ParquetSink,
    summary: RunSummary,
    folder: RunFolder,
    logged: bool,
    live: LiveProgress | None,
    metrics: RunMetrics | None = None,
) -> None:
    """Commit each finished tree the moment the stream hands it over, and count the
    tallies (source errors, problems done earlier) into the summary, the display and the
    metrics."""
    # prefetch_batches=0: with Ray Data's default prefetch, the iterator holds each
    # finished tree until the next one arrives (measured: a fast tree waited for a
    # slow one), so a tree would be committed one tree late.
    batches = dataset.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0)
    held = SecondTrees()
    for batch in batches:
        for result in held.order(results_of(batch)):
            # A Ctrl-C stops the run here, between two commits, even when the
            # KeyboardInterrupt it raised was caught and dropped (`pipeline.run.interrupt`)
            raise_if_interrupted()
            if result.kind == "stopped":  # left at the wall-time cap: nothing to commit
                summary.stopped += 1
                if metrics is not None:
                    metrics.stopped()
                continue
            if result.kind == "problem":
                sink.write_batch(result.records)
                held.committed(result)
                summary.account(result.records)
                if metrics is not None:
                    metrics.committed(result.records)
                # committed: its request log is no longer needed (a failed
                # search's is kept, so the next attempt replays it)
                committed = {t["problem_id"] for t in result.records.get("trees", [])}
                if logged:
                    request_log.clean(folder.store, committed)
                continue
            # A tally: source errors to commit once, problems done earlier.
            errors = result.records.get("errors", [])
            if errors:
                sink.write_batch(result.records)
            summary.errors += len(errors)
            summary.skipped += result.skipped
            if live is not None:
                live.set_total(live.total - len(errors) - result.skipped)
            if metrics is not None:
                metrics.tally(errors, result.skipped)
    for result in held.rest():  # never here: every probe a window needs comes first
        sink.write_batch(result.records)
        summary.account(result.records)


class SecondTrees:
    """The driver's order of commits under the night allocator: a second tree is committed
    after the probes its window was allocated from (`StreamResult.needs`), so that a
    killed night's committed second trees always have their window's probes committed
    (the rerun replays the same window).  The probes travel the same stream and arrive
    soon; a second tree waits here for them, a window's worth at most."""

    def __init__(self) -> None:
        self.probes: set[str] = set()
        self.waiting: list[StreamResult] = []

    def order(self, results: Iterable[StreamResult]) -> Iterator[StreamResult]:
        for result in results:
            if result.tree == "second" and not self.probes.issuperset(result.needs):
                self.waiting.append(result)
                continue
            yield result
            if result.tree == "probe" and result.kind == "problem":
                yield from self._ready()

    def committed(self, result: StreamResult) -> None:
        if result.tree == "probe":  # a probe's tree, or a failed probe's error rows
            rows = [*result.records.get("trees", []), *result.records.get("errors", [])]
            self.probes |= {str(r["problem_id"]) for r in rows if r.get("problem_id")}

    def _ready(self) -> Iterator[StreamResult]:
        ready = [r for r in self.waiting if self.probes.issuperset(r.needs)]
        self.waiting = [r for r in self.waiting if not self.probes.issuperset(r.needs)]
        yield from ready

    def rest(self) -> list[StreamResult]:
        rest, self.waiting = self.waiting, []
        return rest


def _finish_run(
    config: RunConfig,
    folder: RunFolder,
    summary: RunSummary,
    start: float,
    rows_before: dict[str, int],
) -> None:
    """Sweep the request logs, count the rows, and write the final run.json and report
    (`rows_before`: the rows counted when this invocation began)."""
    # A retried attempt of a tree that another attempt had already committed (Ray Data
    # redoes a lost actor's tasks) logs after that tree's clean: sweep once at the end.
    request_log.clean_done(folder.store, folder.searched_problem_ids)
    request_log.remove_if_empty(folder.store)
    summary.rows = folder.counts()
    summary.wall_time_s = time.perf_counter() - start
    tokens = _token_columns(folder)
    ended: dict[str, Any] = {
        "engine_reads": {name: r.as_dict() for name, r in engine_reads(tokens).items()},
        COST_PER_ROW_KEY: cost_per_row(tokens, summary.rows, config.prices),
    }
    shape = gpu_shape(config)
    if shape is not None:
        ended[GPU_HOURS_KEY] = rows_per_gpu_hour(
            shape, rows_before, summary.rows, summary.wall_time_s
        )
    allocated = _allocation(config, folder, summary.problems)
    if allocated is not None:
        ended[ALLOCATION_KEY] = allocated
    write_manifest(config, folder, summary={**_summary_fields(summary), **ended})
    try:
        with folder.local_copy(write_back=REPORT_FILES) as run_dir:
            write_run_report(run_dir, config.prices, config.scorer.kind)
            if allocated is not None:
                with (Path(run_dir) / REPORT_MD).open("a", encoding="utf-8") as report:
                    report.write("\n" + "\n".join(allocation_markdown(allocated)))
    except Exception as exc:  # the data is written; a report failure must not lose the run
        print(f"warning: the run report could not be written: {redact_text(exc)}", file=sys.stderr)


def _allocation(config: RunConfig, folder: RunFolder, selection: int) -> dict[str, Any] | None:
    """run.json's night-allocator block (`pipeline.run.allocation_report`); None when off.
    The night's problems: the selection less its bad rows."""
    if not config.allocation.enabled:
        return None
    schema = SCHEMAS["trees"]
    rows = [
        row
        for table in folder.tables("trees", columns=list(ALLOCATION_COLUMNS), schema=schema)
        for row in table.to_pylist()
    ]
    problems = max(0, selection - len(folder.final_error_keys()))
    return allocation_summary(rows, problems, config.budget)


def _token_columns(folder: RunFolder) -> Any:
    """The committed trees' token counts (pandas), for the engines' reads and the cost per
    kept row (`pipeline.report.engine_reads`, `pipeline.report.row_cost`): seven columns
    read, not the trees."""
    import pandas as pd  # type: ignore[import-untyped]

    schema = SCHEMAS["trees"]  # a column an older part lacks is read as nulls
    tables = folder.tables("trees", columns=list(COLUMNS_READ), schema=schema)
    return pd.concat([t.to_pandas() for t in tables] or [pd.DataFrame(columns=COLUMNS_READ)])


def _earlier_clamped(folder: RunFolder) -> dict[str, ClampedAnswers]:
    """The engine answers whose counts were clamped in earlier invocations of this run, as
    its run.json says (none for a new run); a run.json that cannot be read is replaced
    by this invocation's, as it always was: a warning, not a failed run."""
    try:
        return clamped_from_manifest(folder.read_manifest(), folder.store.join(MANIFEST))
    except InputError as exc:
        print(f"warning: {exc}; earlier clamped counts are not carried over", file=sys.stderr)
        return {}


def _record_board(summary: RunSummary, board: Any, config: RunConfig) -> None:
    """The board's last snapshot into the summary (`record_snapshot`)."""
    import ray

    try:
        snap = ray.get(board.snapshot.remote(), timeout=30)
    except Exception as exc:  # only summary numbers: never fail a finished run
        print(f"warning: board counts unavailable: {redact_text(exc)}", file=sys.stderr)
        return
    record_snapshot(summary, snap, config)


def record_snapshot(summary: RunSummary, snap: dict[str, Any], config: RunConfig) -> None:
    """From a progress board's snapshot (`actors.progress`): what the request logs answered
    instead of the engines, the trees each actor admitted and ran at once, and the engine
    answers whose token counts were clamped, added to earlier invocations'."""
    summary.replayed_requests = int(snap.get("replayed_requests", 0))
    summary.replayed_tokens = int(snap.get("replayed_policy_output_tokens", 0)) + int(
        snap.get("replayed_prm_output_tokens", 0)
    )
    summary.admitted_per_actor = int(snap.get("admitted") or 0) or None
    summary.peak_in_flight_per_actor = int(snap.get("peak_in_flight") or 0) or None
    engines = {"policy": config.policy.engine.kind, "scorer": config.scorer.engine.kind}
    summary.clamped = merge_clamped(summary.clamped, clamped_from_board(snap, engines))


def window_stage(dataset: Any, config: RunConfig, selection: int) -> Any:
    """The night allocator's window stage (`pipeline.run.window_stage`): one actor, one
    call at a time, on the head node, reserving no CPU."""
    import ray

    from pipeline.run.window_stage import WindowStage

    return dataset.map_batches(
        WindowStage,
        fn_constructor_kwargs={"run": config.model_dump(mode="json"), "selection": selection},
        batch_format="pyarrow",
        batch_size=1,
        # one call at a time: the windows' state is the allocator's, in order
        compute=ray.data.ActorPoolStrategy(size=1, max_concurrent_calls_per_actor=1),
        num_cpus=0,
        **on_head_node(),
    )


def search_stage(
    problems: Any, config: RunConfig, actor: type, board: str, wall_cap: WallCap | None = None
) -> Any:
    """The Ray Data stage that searches `problems` (`pipeline.run.stream.problem_stream`: one
    row per block): one finished tree per output block.

    Continuous trees: one problem per Ray Data task (one row per block, batch_size 1) and
    up to trees_per_actor tasks running at once in each actor, so an actor starts the
    next problem the moment a tree ends and each tree's records reach the sink (and are
    committed) as soon as that tree is done.  The actor's async __call__ runs every call
    on one event loop; `max_concurrent_calls_per_actor` is what lets the calls overlap
    (Ray Data's map actors take one call at a time by default: that is why one problem
    per call once ran the trees one after another).  `wall_cap`: the run's wall-time cap,
    which each actor enforces on the trees it starts and runs (`pipeline.run.wall`).
    """
    import ray

    per_actor = config.trees_per_actor
    return problems.map_batches(
        actor,
        fn_constructor_kwargs={
            "run": config.model_dump(mode="json"),
            "board": board,
            "wall": wall_cap,
        },
        compute=ray.data.ActorPoolStrategy(
            size=config.actors,
            max_tasks_in_flight_per_actor=per_actor,
            max_concurrent_calls_per_actor=per_actor,
        ),
        batch_size=1,
        num_cpus=config.actor_num_cpus,
        resources=dict(config.actor_resources) or None,  # e.g. the CPU node group's
        # No max_restarts / max_task_retries here: Ray Data already restarts dead actors
        # and retries their tasks without limit (a killed actor's trees are redone), and
        # passing them (as ray_remote_args) is deprecated in Ray 2.60.
    )


def _summary_fields(summary: RunSummary) -> dict[str, Any]:
    return {
        "searched": summary.searched,
        "skipped": summary.skipped,
        "errors": summary.errors,
        "not_started": summary.not_started,
        "stopped": summary.stopped,
        "grade_timeouts": summary.grade_timeouts,
        "answered_nodes": summary.answered_nodes,
        "correct_nodes": summary.correct_nodes,
        "replayed_requests": summary.replayed_requests,
        "replayed_tokens": summary.replayed_tokens,
        "wall_time_s": round(summary.wall_time_s, 1),
        "admitted_per_actor": summary.admitted_per_actor,
        "peak_in_flight_per_actor": summary.peak_in_flight_per_actor,
        CLAMPED_KEY: clamped_as_json(summary.clamped),
    }
