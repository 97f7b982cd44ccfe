"""An even bucket-to-replica router for Ray Serve (the request-router API, alpha in 2.60).

The Serve clients send each request's tree bucket (`actors.affinity.bucket`:
"bucket-<n>") as the call's `session_id`.  Serve's `ConsistentHashRouter` places
buckets on a hash ring, so with few buckets the replicas get uneven shares (two
buckets on two replicas land on one replica a quarter of the time); evening them out
took several buckets per replica, and every extra bucket splits the coalesced calls
(`actors.coalesce`) into smaller ones, which is what raised the CPU per engine
request with two replicas.  Here bucket n goes to the (n mod R)-th replica in replica
id order, so one bucket per replica is already even and each replica gets one
coalesced stream per search actor; the next replicas in that order are the
fallbacks when its queue is full.  A replica set that changes (a replica dies or
autoscaling adds one) re-deals the buckets at once.  Everything else (the retry and
back-off loop, the fallback walk) is the consistent-hash router's.
"""

from __future__ import annotations

from typing import Any

from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter

_PREFIX = "bucket-"


def bucket_index(routing_key: str) -> int | None:
    """n of "bucket-<n>"; None for any other key (those go round the ring)."""
    if routing_key.startswith(_PREFIX) and routing_key[len(_PREFIX) :].isdigit():
        return int(routing_key[len(_PREFIX) :])
    return None


def even_ranking(replica_ids: list[str], index: int, fallbacks: int) -> list[int]:
    """Positions (in `replica_ids` sorted order) of bucket `index`'s replica and its
    fallbacks: the (index mod R)-th, then the next ones round the list."""
    count = len(replica_ids)
    if not count:
        return []
    order = sorted(range(count), key=replica_ids.__getitem__)
    first = index % count
    return [order[(first + i) % count] for i in range(min(count, 1 + fallbacks))]


class EvenBucketRouter(ConsistentHashRouter):
    """Bucket n -> the (n mod R)-th replica; other keys as the consistent-hash ring."""

    def _lookup_ranked_replicas(self, routing_key: str) -> list[Any]:
        index = bucket_index(routing_key)
        if index is None:
            return list(super()._lookup_ranked_replicas(routing_key))
        replicas = list(self._replica_id_set)
        ranked = even_ranking([r.unique_id for r in replicas], index, self._num_fallback_replicas)
        return [replicas[i] for i in ranked]


__all__ = ["EvenBucketRouter", "bucket_index", "even_ranking"]
