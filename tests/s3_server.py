"""A real S3 HTTP API on 127.0.0.1 for tests: moto's server mode, as a subprocess.

`S3Server().start()` runs `python -m moto.server` on a free loopback port and waits until
it answers; `env()` is the standard AWS environment that points botocore (s3fs, boto3, the
jobs' subprocesses) at it.  `auth=True` turns moto's IAM checks on with no users at all,
so every request is refused as a real S3 refuses unknown credentials (403
InvalidAccessKeyId).  Nothing is faked on the client side: the code under test speaks HTTP.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class S3Server:
    def __init__(self, *, auth: bool = False) -> None:
        self.port = _free_port()
        self.auth = auth
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "AKIAMOTOTESTKEY",
            "AWS_SECRET_ACCESS_KEY": "moto-secret-must-never-leak",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> S3Server:
        env = {**os.environ}
        if self.auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2).close()
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)

    def client(self) -> Any:
        """A boto3 client for setting up and inspecting buckets (test side only)."""
        import boto3

        env = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=env["AWS_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    @contextlib.contextmanager
    def empty_bucket(self, bucket: str, setenv: Any) -> Iterator[S3Server]:
        """A fresh, empty `bucket` for one test, the AWS env pointed at this server through
        `setenv` (pytest's `monkeypatch.setenv`); the bucket is removed afterwards."""
        for key, value in self.env().items():
            setenv(key, value)
        client = self.client()
        client.create_bucket(Bucket=bucket)
        try:
            yield self
        finally:
            for key in self.keys(bucket):
                client.delete_object(Bucket=bucket, Key=key)
            client.delete_bucket(Bucket=bucket)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
