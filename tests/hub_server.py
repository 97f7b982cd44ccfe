"""A small local stand-in for the Hugging Face Hub HTTP API, for tests.

No Hub is reachable from the test machines (no network to huggingface.co), so this stdlib
``http.server`` stands in for it — a fake only where the real thing cannot run. It speaks enough
of the real wire protocol that the *unmodified* ``huggingface_hub`` and ``datasets`` clients work
against it:

* ``POST /api/repos/create`` (409 when the repo exists, so ``exist_ok=True`` works)
* ``POST /api/validate-yaml``, ``GET /api/whoami-v2``
* ``POST /api/{type}s/{repo}/preupload/{rev}`` (``*.parquet`` and files > 1 MiB go through LFS)
* ``POST /{type}s/{repo}.git/info/lfs/objects/batch`` + ``PUT /lfs-upload/{sha256}`` per blob
* ``POST /api/{type}s/{repo}/commit/{rev}`` (ndjson: ``file``, ``lfsFile``, ``deletedFile``,
  ``deletedFolder``; ``parentCommit`` is checked)
* ``GET /api/{type}s/{repo}[/revision/{rev}]`` (repo info)
* ``GET /api/{type}s/{repo}/tree/{rev}[/{path}]`` (404 + ``X-Error-Code: EntryNotFound`` for a
  missing folder), ``POST /api/{type}s/{repo}/paths-info/{rev}``
* ``GET``/``HEAD /[{type}s/]{repo}/resolve/{rev}/{path}`` with ``Range`` support

Every commit is an immutable snapshot (path -> blob), so revisions resolve exactly. Blob bytes
live in a temporary folder, content-addressed by sha256. It binds loopback only
(127.0.0.1, ephemeral port). Private repos answer 401 to requests without a bearer token; any
non-empty token is accepted.

Failure injection for tests: set ``server.fail_commits = True`` (commit endpoint answers 500),
``server.fail_preupload = True``, ``server.fail_all = True`` (every request answers 500) or
``server.fail_lfs_batch = n`` (the next n LFS batch requests answer 503; the client retries
them, warning with the URL) or ``server.commits_before_failure = n`` (n more commits succeed,
then every commit answers 500 until it is set back to None).  ``server.commit_sizes`` lists
the files (added or deleted) of every commit made.  ``server.upload_delay_s``: each LFS
upload waits this long first (a slow link, so a client can be killed mid-upload).
``server.basic_auth = "user:password"``: a Hub behind a proxy that checks basic auth (an
endpoint URL with userinfo, which the client sends as basic auth in place of its token) also
takes those credentials.  ``server.requests`` records ``(method, path)`` of every request
(never headers), ``server.request_times`` when each came.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 1024 * 1024
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


@dataclass(frozen=True)
class Blob:
    sha256: str
    git_oid: str
    size: int
    lfs: bool


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    private: bool
    commits: list[tuple[str, dict[str, Blob]]] = field(default_factory=list)  # (sha, tree)

    def resolve(self, revision: str) -> tuple[str, dict[str, Blob]] | None:
        revision = unquote(revision)
        if revision == "main":
            return self.commits[-1]
        for sha, tree in self.commits:
            if sha == revision:
                return sha, tree
        return None


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (a publish killed mid-upload) is not the server's
        # fault: say nothing, as a real Hub would not tell the next client about it.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class HubServer:
    """Thread-backed local Hub. Use ``start()``/``stop()`` or as a context manager."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="fake-hub-"))
        self._objects = self._dir / "objects"
        self._objects.mkdir()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.request_times: list[float] = []  # time.monotonic() of each of `requests`
        self.fail_commits = False
        self.fail_preupload = False
        self.fail_all = False
        self.fail_lfs_batch = 0
        self.commits_before_failure: int | None = None
        self.commit_sizes: list[int] = []
        self.upload_delay_s = 0.0
        self.basic_auth: str | None = None
        self._counter = 0
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.hub = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- storage -------------------------------------------------------------------------------
    def store(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        path = self._objects / sha
        if not path.exists():
            path.write_bytes(data)
        return sha

    def has_object(self, sha256: str) -> bool:
        return (self._objects / sha256).exists()

    def read_object(self, sha256: str) -> bytes:
        return (self._objects / sha256).read_bytes()

    def new_commit_sha(self) -> str:
        self._counter += 1
        return hashlib.sha1(f"{time.time_ns()}-{self._counter}".encode()).hexdigest()

    def files(self, repo_id: str, repo_type: str = "dataset") -> dict[str, bytes]:
        """Current contents of ``main`` (for assertions)."""
        repo = self.repos[(repo_type, repo_id)]
        return {p: self.read_object(b.sha256) for p, b in repo.commits[-1][1].items()}


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code


_API_REPO = re.compile(r"^/api/(models|datasets|spaces)/([^/]+/[^/]+?)(?:/(.*))?$")
_LFS_BATCH = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)\.git/info/lfs/objects/batch$")
_RESOLVE = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        return

    # --- plumbing ------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers=headers)

    def _authed(self) -> bool:
        auth = self.headers.get("Authorization", "")
        if self.hub.basic_auth is not None and auth.startswith("Basic "):
            return base64.b64decode(auth.removeprefix("Basic ")).decode() == self.hub.basic_auth
        return auth.startswith("Bearer ") and len(auth) > len("Bearer ")

    def _repo(self, type_plural: str | None, repo_id: str) -> Repo:
        repo_type = REPO_TYPES[type_plural or "models"]
        repo = self.hub.repos.get((repo_type, unquote(repo_id)))
        if repo is None or (repo.private and not self._authed()):
            raise _HTTPError(404 if repo is None else 401, "Repository not found", "RepoNotFound")
        return repo

    def _rev(self, repo: Repo, revision: str) -> tuple[str, dict[str, Blob]]:
        found = repo.resolve(revision)
        if found is None:
            raise _HTTPError(404, f"Invalid rev id: {unquote(revision)}", "RevisionNotFound")
        return found

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        with self.hub.lock:
            self.hub.requests.append((method, path))
            self.hub.request_times.append(time.monotonic())
        body = self._body() if method in ("POST", "PUT") else b""
        try:
            if self.hub.fail_all:
                raise _HTTPError(500, "Injected server failure")
            self._route(method, path, query, body)
        except _HTTPError as err:
            headers = {"X-Error-Message": err.message}
            if err.error_code:
                headers["X-Error-Code"] = err.error_code
            self._send(
                err.status,
                json.dumps({"error": err.message}).encode(),
                headers=headers,
                head=method == "HEAD",
            )

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # --- routes --------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        hub = self.hub
        if method == "POST" and path == "/api/repos/create":
            return self._create_repo(json.loads(body or b"{}"))
        if method == "POST" and path == "/api/validate-yaml":
            return self._json(200, {})
        if method == "GET" and path == "/api/whoami-v2":
            if not self._authed():
                raise _HTTPError(401, "Invalid credentials in Authorization header")
            return self._json(200, {"type": "user", "name": "test-user", "orgs": []})
        if method == "PUT" and path.startswith("/lfs-upload/"):
            time.sleep(self.hub.upload_delay_s)
            oid = path.rsplit("/", 1)[1]
            if hashlib.sha256(body).hexdigest() != oid:
                raise _HTTPError(400, "sha256 mismatch")
            hub.store(body)
            return self._send(200)
        if m := _LFS_BATCH.match(path):
            if method != "POST":
                raise _HTTPError(405, "Method not allowed")
            self._repo(m.group(1), m.group(2))
            with hub.lock:
                failing, hub.fail_lfs_batch = hub.fail_lfs_batch > 0, max(hub.fail_lfs_batch - 1, 0)
            if failing:
                raise _HTTPError(503, "Injected LFS batch failure")
            return self._lfs_batch(json.loads(body))
        if m := _API_REPO.match(path):
            type_plural, repo_id, rest = m.group(1), m.group(2), m.group(3) or ""
            repo = self._repo(type_plural, repo_id)
            return self._api(method, repo, rest, query, body)
        if (m := _RESOLVE.match(path)) and method in ("GET", "HEAD"):
            repo = self._repo(m.group(1), m.group(2))
            return self._resolve(repo, m.group(3), unquote(m.group(4)), head=method == "HEAD")
        raise _HTTPError(404, f"Not found: {method} {path}")

    def _create_repo(self, payload: dict[str, Any]) -> None:
        if not self._authed():
            raise _HTTPError(401, "Invalid credentials in Authorization header")
        name, org = payload.get("name"), payload.get("organization") or "test-user"
        repo_type = payload.get("type") or "model"
        repo_id = f"{org}/{name}"
        plural = {v: k for k, v in REPO_TYPES.items()}[repo_type]
        url = (
            f"{self.hub.endpoint}/{repo_id}"
            if repo_type == "model"
            else (f"{self.hub.endpoint}/{plural}/{repo_id}")
        )
        with self.hub.lock:
            if (repo_type, repo_id) in self.hub.repos:  # the Hub's 409 body carries the url
                body = {"error": "You already created this repo", "url": url}
                return self._json(409, body, headers={"X-Error-Message": body["error"]})
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            repo = Repo(repo_id=repo_id, repo_type=repo_type, private=private)
            repo.commits.append((self.hub.new_commit_sha(), {}))
            self.hub.repos[(repo_type, repo_id)] = repo
        self._json(200, {"url": url, "name": repo_id})

    def _lfs_batch(self, payload: dict[str, Any]) -> None:
        objects = []
        for obj in payload.get("objects", []):
            entry: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"]}
            if not self.hub.has_object(obj["oid"]):
                href = f"{self.hub.endpoint}/lfs-upload/{obj['oid']}"
                entry["actions"] = {"upload": {"href": href, "header": {}}}
            objects.append(entry)
        self._json(200, {"transfer": "basic", "objects": objects})

    def _api(
        self, method: str, repo: Repo, rest: str, query: dict[str, list[str]], body: bytes
    ) -> None:
        action, _, tail = rest.partition("/")
        if method == "GET" and action in ("", "revision"):
            sha, tree = self._rev(repo, tail or "main")
            return self._json(200, self._info(repo, sha, tree))
        if method == "POST" and action == "preupload":
            if self.hub.fail_preupload:
                raise _HTTPError(500, "Injected preupload failure")
            self._rev(repo, tail)
            files = json.loads(body).get("files", [])
            out = [
                {
                    "path": f["path"],
                    "uploadMode": (
                        "lfs"
                        if f["size"] > 0
                        and (f["path"].endswith(".parquet") or f["size"] > LFS_THRESHOLD)
                        else "regular"
                    ),
                    "shouldIgnore": False,
                    "oid": None,
                }
                for f in files
            ]
            return self._json(200, {"files": out, "commitOid": self._rev(repo, tail)[0]})
        if method == "POST" and action == "commit":
            return self._commit(repo, tail, body)
        if method == "GET" and action == "tree":
            revision, _, folder = tail.partition("/")
            recursive = query.get("recursive", ["False"])[0].lower() == "true"
            return self._tree(repo, revision, unquote(folder).strip("/"), recursive)
        if method == "POST" and action == "paths-info":
            return self._paths_info(repo, tail, body)
        raise _HTTPError(404, f"Not found: {method} {rest}")

    def _info(self, repo: Repo, sha: str, tree: dict[str, Blob]) -> dict[str, Any]:
        return {
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": sha,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "tags": [],
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "siblings": [{"rfilename": p} for p in sorted(tree)],
        }

    def _commit(self, repo: Repo, revision: str, body: bytes) -> None:
        if self.hub.fail_commits:
            raise _HTTPError(500, "Injected commit failure")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        with self.hub.lock:
            if self.hub.commits_before_failure is not None:
                if self.hub.commits_before_failure <= 0:
                    raise _HTTPError(500, "Injected commit failure")
                self.hub.commits_before_failure -= 1
            head_sha, head_tree = self._rev(repo, revision)
            if head_sha != repo.commits[-1][0]:
                raise _HTTPError(400, "Can only commit on top of main in this test server")
            tree = dict(head_tree)
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "header":
                    parent = value.get("parentCommit")
                    if parent and parent != head_sha:
                        raise _HTTPError(412, "A commit has happened since. Please refresh.")
                elif key == "file":
                    data = base64.b64decode(value["content"])
                    sha = self.hub.store(data)
                    tree[value["path"]] = Blob(sha, _git_blob_oid(data), len(data), lfs=False)
                elif key == "lfsFile":
                    oid = value["oid"]
                    if not self.hub.has_object(oid):
                        raise _HTTPError(422, f"LFS object {oid} was never uploaded")
                    data = self.hub.read_object(oid)
                    tree[value["path"]] = Blob(oid, _git_blob_oid(data), len(data), lfs=True)
                elif key == "deletedFile":
                    if tree.pop(value["path"], None) is None:
                        raise _HTTPError(404, f"File not found: {value['path']}", "EntryNotFound")
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    doomed = [p for p in tree if p.startswith(prefix)]
                    if not doomed:
                        raise _HTTPError(404, f"Folder not found: {value['path']}", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
                else:
                    raise _HTTPError(400, f"Unsupported commit operation {key!r}")
            new_sha = self.hub.new_commit_sha()
            repo.commits.append((new_sha, tree))
            self.hub.commit_sizes.append(sum(1 for line in lines if line["key"] != "header"))
        prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
        self._json(
            200,
            {
                "success": True,
                "commitOid": new_sha,
                "commitUrl": f"{self.hub.endpoint}/{prefix}{repo.repo_id}/commit/{new_sha}",
            },
        )

    @staticmethod
    def _file_entry(path: str, blob: Blob) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": "file",
            "path": path,
            "size": blob.size,
            "oid": blob.git_oid,
        }
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
        return entry

    @staticmethod
    def _folder_entry(path: str) -> dict[str, Any]:
        return {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()}

    def _tree(self, repo: Repo, revision: str, folder: str, recursive: bool) -> None:
        _, tree = self._rev(repo, revision)
        prefix = f"{folder}/" if folder else ""
        if folder and not any(p.startswith(prefix) for p in tree):
            raise _HTTPError(404, f"Entry not found: {folder}", "EntryNotFound")
        files: list[dict[str, Any]] = []
        folders: set[str] = set()
        for path in sorted(tree):
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                if recursive or depth == 1:
                    folders.add(prefix + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                files.append(self._file_entry(path, tree[path]))
        out = [self._folder_entry(f) for f in sorted(folders)] + files
        self._json(200, out)

    def _paths_info(self, repo: Repo, revision: str, body: bytes) -> None:
        _, tree = self._rev(repo, revision)
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            paths = list(json.loads(body).get("paths", []))
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        out = []
        for raw in paths:
            p = raw.strip("/")
            if p in tree:
                out.append(self._file_entry(p, tree[p]))
            elif any(k.startswith(p + "/") for k in tree):
                out.append(self._folder_entry(p))
        self._json(200, out)

    def _resolve(self, repo: Repo, revision: str, path: str, *, head: bool) -> None:
        sha, tree = self._rev(repo, revision)
        blob = tree.get(path)
        if blob is None:
            raise _HTTPError(404, f"Entry not found: {path}", "EntryNotFound")
        data = self.hub.read_object(blob.sha256)
        etag = blob.sha256 if blob.lfs else blob.git_oid
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
        }
        if blob.lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(blob.size)
        status = 200
        rng = self.headers.get("Range")
        if rng and (m := re.match(r"bytes=(\d*)-(\d*)$", rng.strip())):
            start_s, end_s = m.groups()
            if start_s:
                start = int(start_s)
                end = min(int(end_s), len(data) - 1) if end_s else len(data) - 1
            else:  # suffix range
                start, end = max(0, len(data) - int(end_s)), len(data) - 1
            if start >= len(data) and len(data) > 0:
                headers["Content-Range"] = f"bytes */{len(data)}"
                raise _HTTPError(416, "Range not satisfiable")
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data = data[start : end + 1]
            status = 206
        self._send(
            status, data, content_type="application/octet-stream", headers=headers, head=head
        )
