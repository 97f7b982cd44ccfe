"""Validate a KubeRay manifest as the API server does under `kubectl apply` (strict field
validation, kubectl's default since 1.27): against the CRD's schema of the KubeRay release
the manifests name, vendored in tests/fixtures/kuberay/ by scripts/vendor_kuberay_crds.py.

Strict means an unknown field is an error, not silently dropped: a field the release does
not have (RayCronJob's `timeZone` before v1.7.0) or a misspelling.  A structural CRD
schema allows unknown fields only where it says so (`additionalProperties`, or
`x-kubernetes-preserve-unknown-fields`); everywhere else this closes the object.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

KUBERAY_VERSION = "v1.7.0"
SCHEMAS = Path(__file__).resolve().parent / "fixtures" / "kuberay" / KUBERAY_VERSION


def strict(node: Any) -> Any:
    """The schema with every object that lists its properties closed to others."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    closed = {
        key: (
            {name: strict(sub) for name, sub in value.items()}
            if key == "properties"
            else strict(value)
        )
        for key, value in node.items()
    }
    open_ = "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and not open_:
        closed["additionalProperties"] = False
    return closed


@functools.cache
def validator(kind: str) -> Draft7Validator:
    path = SCHEMAS / f"{kind}.schema.json.gz"
    return Draft7Validator(strict(json.loads(gzip.decompress(path.read_bytes()))))


def problems(manifest: dict[str, Any]) -> list[str]:
    """What the API server would refuse in `manifest`, as `path: message` lines."""
    kind = manifest.get("kind")
    if not (SCHEMAS / f"{kind}.schema.json.gz").is_file():
        return [f"kind {kind!r}: no vendored KubeRay {KUBERAY_VERSION} schema"]
    if manifest.get("apiVersion") != "ray.io/v1":
        return [f"apiVersion {manifest.get('apiVersion')!r}: KubeRay serves ray.io/v1"]
    found = []
    for error in validator(str(kind)).iter_errors(manifest):
        where = ".".join(str(part) for part in error.absolute_path) or "(top)"
        found.append(f"{where}: {error.message}")
    return sorted(found)
