"""Where a run's files live: a local folder or an object-store prefix, one interface.

`open_store("out")`, `open_store("s3://bucket/prefix")` or `open_store("gs://...")` give a
`Store`: a folder on an fsspec filesystem (local disk, s3fs, gcsfs) with the few
operations the sink, the manifest, the lease and the nightly ledger need.  Ray Data,
pyarrow and pandas all accept the same fsspec filesystem, so nothing else needs its
own I/O code.

What differs between a disk and a bucket, and how each operation copes:

* **No atomic rename on object stores.**  A rename there is copy + delete.  A single
  PUT, however, is atomic (a reader sees the whole object or none), so on a bucket a
  part is written straight to its final name and the batch's commit marker, written
  last, is what makes it visible (`pipeline.store.sink`).  A local folder keeps the
  temp-file + rename dance it always had.
* **Create-if-absent.**  `create_exclusive` is the one coordination primitive: a local
  hard link of a fully written temporary file (fails if the name exists), an S3
  `PutObject` with `If-None-Match: *` (AWS S3 since 2024-08, moto, MinIO), a GCS upload
  with `ifGenerationMatch=0`.  The run lease and the nightly ledger are built on it.
* **Credentials and endpoints** come only from the standard environment
  (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
  `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`; `GOOGLE_APPLICATION_CREDENTIALS` for GCS)
  through botocore / google-auth; a URI carrying credentials is refused
  (`check_output_root`), so no secret ever reaches run.json, a log or a card.
* **Failures.**  botocore retries throttling (503 SlowDown) and 5xx answers itself
  (`AWS_RETRY_MODE` / `AWS_MAX_ATTEMPTS`, default "legacy", 5 attempts with backoff);
  an error that outlives the retries surfaces as an `OSError` that `describe_os_error`
  turns into one line naming the output root.  A local disk that is full (ENOSPC) or
  over quota (EDQUOT) fails a write with `OutputFullError`, its half-written temp
  file removed, carrying what the write needed on disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import OutputFullError, OutputLocationError

_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs")
# The kernel's "no room" answers, in the words a message gives them.
OUT_OF_SPACE = {
    errno.ENOSPC: "no space left on device (ENOSPC)",
    errno.EDQUOT: "disk quota exceeded (EDQUOT)",
}


def is_remote(location: str | Path) -> bool:
    """Is `location` an object-store URI (s3://, gs://) rather than a local path?"""
    if isinstance(location, Path):
        return False
    match = _SCHEME.match(location)
    return match is not None and match["scheme"].lower() != "file"


def check_output_root(location: str | Path) -> str | Path:
    """The output root as the config keeps it: a `Path` for a local folder, the URI string
    for an object store.  Refuses credentials inside the URI and unknown schemes."""
    if isinstance(location, Path):
        return location
    match = _SCHEME.match(location)
    if not match:
        return Path(location)
    scheme = match["scheme"].lower()
    if scheme == "file":
        return Path(match["rest"])
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(
            f"output_root {location}: unsupported scheme {scheme}:// (a local path, s3:// or gs://)"
        )
    bucket = match["rest"].split("/", 1)[0]
    if "@" in bucket or ":" in bucket:
        raise ValueError(
            f"output_root {scheme}://…: credentials do not belong in the URI; set them in "
            "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL)"
        )
    if not bucket:
        raise ValueError(f"output_root {location}: no bucket name")
    return f"{scheme}://{match['rest'].rstrip('/')}"


def _filesystem(scheme: str) -> Any:
    """A fresh fsspec filesystem for `scheme`, configured from the environment only."""
    if scheme in ("s3", "s3a"):
        import s3fs  # type: ignore[import-untyped, unused-ignore]

        # botocore reads AWS_ENDPOINT_URL(_S3) itself; passing it explicitly keeps older
        # botocores (and aiobotocore's own session) on the same endpoint.
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        client_kwargs: dict[str, Any] = {}
        if endpoint:
            client_kwargs["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            client_kwargs["region_name"] = region
        # skip_instance_cache: credentials or endpoints changed in the environment take effect.
        return s3fs.S3FileSystem(client_kwargs=client_kwargs, skip_instance_cache=True)
    import fsspec  # type: ignore[import-untyped, unused-ignore]

    try:
        return fsspec.filesystem("gcs" if scheme == "gs" else scheme)
    except ImportError:  # gcsfs is not a dependency (untested here): say what to do
        raise OutputLocationError(
            f"output_root {scheme}://...: needs the gcsfs package, which is not installed "
            "(pip install gcsfs, matching the installed fsspec)"
        ) from None


@dataclass(frozen=True)
class Store:
    """A folder: `fs` is an fsspec filesystem, `path` the folder in it (no scheme)."""

    fs: Any
    path: str
    uri: str  # what messages and summaries print: the local path or scheme://bucket/prefix
    remote: bool

    def child(self, *names: str) -> Store:
        path = "/".join([self.path.rstrip("/"), *names])
        uri = "/".join([self.uri.rstrip("/"), *names])
        return Store(self.fs, path, uri, self.remote)

    def join(self, *names: str) -> str:
        return "/".join([self.path.rstrip("/"), *names])

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def local_path(self) -> Path:
        if self.remote:
            raise ValueError(f"{self.uri} is not a local folder")
        return Path(self.path)

    def display(self) -> str | Path:
        """The folder as callers printed it before: a `Path` locally, the URI remotely."""
        return self.uri if self.remote else Path(self.path)

    # -- reading --------------------------------------------------------------------
    def names(self, *sub: str) -> list[str]:
        """File names directly in `sub` (empty when the folder does not exist)."""
        folder = self.join(*sub)
        if not self.remote:
            local = Path(folder)
            return sorted(p.name for p in local.iterdir()) if local.is_dir() else []
        try:
            entries = self.fs.ls(folder, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def exists(self, *sub: str) -> bool:
        if not self.remote:
            return Path(self.join(*sub)).exists()
        self.fs.invalidate_cache(self.join(*sub))
        return bool(self.fs.exists(self.join(*sub)))

    def is_dir(self) -> bool:
        if not self.remote:
            return Path(self.path).is_dir()
        # A prefix "exists" on a bucket when anything lies under it.
        return bool(self.names())

    def read_bytes(self, *sub: str) -> bytes:
        if not self.remote:
            return Path(self.join(*sub)).read_bytes()
        data: bytes = self.fs.cat_file(self.join(*sub))
        return data

    def read_text(self, *sub: str) -> str:
        return self.read_bytes(*sub).decode("utf-8")

    def read_many(self, paths: list[str]) -> dict[str, bytes]:
        """Whole files by full path (as `join` returns them); a bucket fetches them
        concurrently (s3fs/gcsfs `cat` of a list), not one request after another."""
        if not paths:
            return {}
        if not self.remote:
            return {path: Path(path).read_bytes() for path in paths}
        found: dict[str, bytes] = self.fs.cat(paths)
        by_name = {self.fs._strip_protocol(k): v for k, v in found.items()}
        return {path: by_name[self.fs._strip_protocol(path)] for path in paths}

    # -- writing --------------------------------------------------------------------
    def makedirs(self, *sub: str) -> None:
        """Create a local folder; a bucket has no folders (a prefix exists once written)."""
        if not self.remote:
            Path(self.join(*sub)).mkdir(parents=True, exist_ok=True)

    def write_bytes(self, data: bytes, *sub: str) -> None:
        """Replace a file whole: a crash leaves the old content or the new, never half.

        A full disk (or quota) raises `OutputFullError` with what the file needs on disk;
        the half-written temp file is removed first, so the space it took is free again.
        """
        target = self.join(*sub)
        if not self.remote:
            path = Path(target)
            temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                temp.write_bytes(data)
                os.replace(temp, path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    temp.unlink(missing_ok=True)
                reason = out_of_space(exc)
                if reason is None:
                    raise
                needed = self.on_disk(len(data))
                raise OutputFullError(
                    f"{target}: {reason} (the file needs {needed:,} bytes)",
                    path=target,
                    needed_bytes=needed,
                    reason=reason,
                ) from exc
            return
        self.fs.pipe_file(target, data)  # one PUT: atomic on S3 and GCS

    def on_disk(self, size: int) -> int:
        """What a file of `size` bytes takes on this folder's filesystem: whole blocks."""
        if self.remote:
            return size
        try:
            block = os.statvfs(self.path).f_frsize or 4096
        except OSError:
            block = 4096
        return -(-size // block) * block

    def write_text(self, text: str, *sub: str) -> None:
        self.write_bytes(text.encode("utf-8"), *sub)

    def create_exclusive(self, data: bytes, *sub: str) -> bool:
        """Create a file only if it does not exist; False when it already did.

        Two writers racing for one name: exactly one gets True.
        """
        target = self.join(*sub)
        if not self.remote:
            return _create_local(Path(target), data)
        try:
            # s3fs: PutObject If-None-Match: *; gcsfs: ifGenerationMatch=0.
            # A 412 Precondition Failed arrives as FileExistsError.
            self.fs.pipe_file(target, data, mode="create")
        except FileExistsError:
            return False
        return True

    def delete(self, *sub: str) -> None:
        target = self.join(*sub)
        if not self.remote:
            Path(target).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(target)

    def delete_many(self, paths: list[str]) -> None:
        """Delete full paths (as `join` returns them); a bucket does it in bulk requests."""
        if not paths:
            return
        if not self.remote:
            for path in paths:
                Path(path).unlink(missing_ok=True)
            return
        self.fs.rm(paths)


def _create_local(path: Path, data: bytes) -> bool:
    """Create-if-absent on a local disk, the file whole from the first moment.

    Written under a temporary name and hard-linked to its name (a link fails when the
    name exists), so a reader never sees it empty or half written.  Where the filesystem
    has no hard links, an exclusive open does the create.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, 0o644)
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        Path(temp).unlink(missing_ok=True)
    try:  # no hard links on this filesystem
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def open_store(location: str | Path) -> Store:
    """The `Store` of a local path or an object-store URI (credentials from the env)."""
    checked = check_output_root(location)
    if isinstance(checked, Path):
        path = checked.expanduser()
        return Store(None, str(path), str(path), remote=False)
    match = _SCHEME.match(checked)
    assert match is not None
    scheme = match["scheme"].lower()
    return Store(_filesystem(scheme), match["rest"], checked, remote=True)


def describe_os_error(root: str | Path, exc: BaseException) -> str:
    """One line for an I/O failure under `root` (never a credential: the URI has none)."""
    text = str(exc)
    lowered = text.lower()
    if "nosuchbucket" in lowered or "bucket does not exist" in lowered:
        what = "bucket does not exist"
    elif type(exc).__name__ == "NoCredentialsError":  # botocore's, no OSError
        what = (
            "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE, or run where a role provides them)"
        )
    elif isinstance(exc, PermissionError) or any(
        s in lowered
        for s in ("accessdenied", "access denied", "invalidaccesskeyid", "signaturedoesnotmatch")
    ):
        what = (
            "access denied (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy)"
        )
    elif isinstance(exc, FileNotFoundError) and is_remote(str(root)):
        what = "bucket does not exist"
    elif isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.ENOSPC):
        what = exc.strerror or text
    else:
        what = text.splitlines()[0] if text else type(exc).__name__
    return f"output_root {root}: {what}"


def out_of_space(exc: BaseException) -> str | None:
    """The reason in words when `exc` is a full disk (ENOSPC) or quota (EDQUOT), else None."""
    if isinstance(exc, OutputFullError):
        return exc.reason or None
    if isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE:
        return OUT_OF_SPACE[exc.errno]
    return None


def is_storage_error(exc: BaseException) -> bool:
    """Is `exc` an object store failing (after its client's retries), not a bug of ours?

    s3fs turns most S3 answers into `OSError`s, but a connection that cannot be made at
    all surfaces as botocore's own `EndpointConnectionError` (not an `OSError`).
    """
    if isinstance(exc, OSError):
        return True
    try:
        from botocore.exceptions import (  # type: ignore[import-untyped, unused-ignore]
            BotoCoreError,
            ClientError,
        )
    except ImportError:
        return False
    return isinstance(exc, BotoCoreError | ClientError)


def check_reachable(store: Store, root: str | Path | None = None) -> None:
    """Fail before any work when a bucket is missing or the credentials are refused; the
    message names `root` (the output root the user wrote) when given, else the store."""
    if not store.remote:
        return
    bucket = store.path.split("/", 1)[0]
    try:
        store.fs.ls(bucket, detail=False, refresh=True)
    except Exception as exc:  # botocore/s3fs raise several kinds; all mean "cannot use it"
        raise OutputLocationError(describe_os_error(root or store.uri, exc)) from None


__all__ = [
    "Store",
    "check_output_root",
    "check_reachable",
    "describe_os_error",
    "is_remote",
    "is_storage_error",
    "open_store",
    "out_of_space",
]
