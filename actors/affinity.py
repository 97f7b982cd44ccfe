"""Which tree a request belongs to, without the search core knowing about routing.

The search actor wraps each tree's search in `tree_affinity(key)`; `ServePolicy` and
`ServeScorer` read `current_tree()` when a request leaves, so every request of one
tree carries the same routing key.  A contextvar is the carrier because asyncio
copies the current context into every task the search creates (the k children of
a leaf, scored concurrently, still see their tree's key), and `search/` never sees
it.

The Serve clients hash the key into one of a few buckets (`bucket`: a fixed
number per replica, the same in every process) and send the bucket as the
call's routing key: the requests of every tree of a bucket share coalesced calls
(one call per bucket, not per tree) and one replica, so a tree's requests still
all reach one replica.

The bucket reaches Ray Serve as the call's `session_id`; with `affinity: true`
and more than one replica the deployment routes with `affinity_router`: `even`
(the default, `actors.routing.EvenBucketRouter`: bucket n -> replica n mod R, the
next replicas as fallbacks when its queue is full, re-dealt when the replica set
changes) or `consistent_hash` (Serve's `ConsistentHashRouter`, a hash ring).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# Ray Serve's consistent-hash router (experimental in Ray 2.60; import path, so the
# deployment resolves it in the Serve controller and the handle's router).
CONSISTENT_HASH_ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
# Bucket n -> replica n mod R (actors/routing.py): even with one bucket per replica.
EVEN_BUCKET_ROUTER = "actors.routing.EvenBucketRouter"

_TREE: ContextVar[str | None] = ContextVar("bgmcts_tree", default=None)


def current_tree() -> str | None:
    """The routing key of the tree whose search is running here (None: no tree)."""
    return _TREE.get()


@contextmanager
def tree_affinity(key: str) -> Iterator[None]:
    """Mark every request made inside this block (and its tasks) as tree `key`'s."""
    token = _TREE.set(key)
    try:
        yield
    finally:
        _TREE.reset(token)


def bucket(tree: str, buckets: int) -> str:
    """The routing key of `tree`'s bucket: a stable hash (the same in every process and
    run, unlike `hash`) into `buckets` buckets."""
    return f"bucket-{zlib.crc32(tree.encode()) % buckets}"
