"""Where a run's rows live: filesystems, the run folder, the sink, leases, resume, request log.

* `filesystem` - a local folder or an object-store prefix behind one `Store` interface;
* `run_folder` - one run's folder, `<output_root>/run=<id>`: the only place that knows
  its layout;
* `sink` - the streaming Parquet sink (a crash loses at most the problems in flight);
* `lease`, `object_lease` - one writer per run, on a disk and on object storage;
* `resume` - what a (re)started run still has to do;
* `request_log` - what each unfinished tree has already paid for, replayed on a retry.
"""
