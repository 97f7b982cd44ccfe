"""Where a run's rows live: filesystems, the run folder, the sink, leases, resume."""
