"""Vendor the KubeRay CRD schemas the manifests in jobs/ are checked against.

    python scripts/vendor_kuberay_crds.py CRD_DIR CHART_VALUES [--version v1.7.0]

CRD_DIR is `ray-operator/config/crd/bases` of a KubeRay checkout at the release tag (or
the CRD files of the release's Helm chart, `helm-chart/kuberay-operator/crds`).  For
each resource the manifests use (RayJob, RayCronJob) this writes the served version's
`openAPIV3Schema` as gzipped JSON under tests/fixtures/kuberay/<version>/, without the
`description` texts: they are `kubectl explain`'s help, about 80% of the bytes, and no
part of validation.  Everything that validates (types, enums, required, formats,
`x-kubernetes-*` markers) is kept as released.  CHART_VALUES is the operator chart's
`helm-chart/kuberay-operator/values.yaml` at the same tag: its `featureGates` list (the
defaults jobs/kuberay-operator-values.yaml must repeat, since Helm replaces a list whole)
is kept as featureGates.json.

Why this version: v1.7.0 is the first release whose RayCronJob has `spec.timeZone`, and
the nightly manifest runs at 02:00 UTC whatever the cluster's zone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
KINDS = {"RayJob": "ray.io_rayjobs.yaml", "RayCronJob": "ray.io_raycronjobs.yaml"}


def strip_descriptions(node: Any) -> Any:
    """The schema without `description` keys (a property *named* description is kept)."""
    if isinstance(node, dict):
        kept = {}
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                continue
            if key == "properties" and isinstance(value, dict):
                kept[key] = {name: strip_descriptions(sub) for name, sub in value.items()}
            else:
                kept[key] = strip_descriptions(value)
        return kept
    if isinstance(node, list):
        return [strip_descriptions(item) for item in node]
    return node


def served_schema(crd: dict[str, Any], api_version: str = "v1") -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        if version["name"] == api_version:
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise SystemExit(f"{crd['metadata']['name']}: no served version {api_version}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd_dir", type=Path)
    parser.add_argument("chart_values", type=Path)
    parser.add_argument("--version", default="v1.7.0", help="the KubeRay release of CRD_DIR")
    args = parser.parse_args(argv)
    out = REPO / "tests" / "fixtures" / "kuberay" / args.version
    out.mkdir(parents=True, exist_ok=True)
    for kind, name in KINDS.items():
        path = args.crd_dir / name
        if not path.is_file():
            print(f"error: {path}: not found (CRD_DIR is ray-operator/config/crd/bases)")
            return 2
        crd = yaml.safe_load(path.read_text())
        schema = strip_descriptions(served_schema(crd))
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        target = out / f"{kind}.schema.json.gz"
        # mtime 0: the same CRD gives the same bytes, so a re-vendor shows no diff
        target.write_bytes(gzip.compress(text.encode(), mtime=0))
        print(f"{target.relative_to(REPO)}: {len(text):,} bytes of schema", file=sys.stderr)
    gates = yaml.safe_load(args.chart_values.read_text())["featureGates"]
    (out / "featureGates.json").write_text(json.dumps(gates, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
