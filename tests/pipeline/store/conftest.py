"""The moto S3 server the bucket tests of this folder share (tests/s3_server.py).

One server per test module; each test gets the module's bucket (its `BUCKET`) fresh and
empty, with the AWS environment pointed at the server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3_server import S3Server


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with S3Server() as s3:
        yield s3


@pytest.fixture
def s3(
    server: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[S3Server]:
    """The module's S3 server with a fresh, empty bucket named by the module's `BUCKET`."""
    with server.empty_bucket(request.module.BUCKET, monkeypatch.setenv):
        yield server
