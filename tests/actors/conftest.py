"""Real local Ray cluster and real Serve deployments of the embedded SmolLM2 model."""

from __future__ import annotations

import os

# Before Ray is imported anywhere: no token auth and no usage-stats calls (shared FACTS).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
