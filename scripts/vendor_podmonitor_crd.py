"""Vendor the Prometheus operator's PodMonitor schema that jobs/podmonitor.yaml is checked
against.

    python scripts/vendor_podmonitor_crd.py CRD_FILE [--version v0.93.0]

CRD_FILE is `example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml` of a
prometheus-operator checkout at the release tag.  It writes the served `v1` version's
`openAPIV3Schema` as gzipped JSON under tests/fixtures/prometheus-operator/<version>/,
without the `description` texts, exactly as scripts/vendor_kuberay_crds.py does for
KubeRay's (the same two functions): everything that validates is kept as released.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vendor_kuberay_crds import REPO, served_schema, strip_descriptions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd_file", type=Path)
    parser.add_argument("--version", default="v0.93.0", help="the operator release of CRD_FILE")
    args = parser.parse_args(argv)
    if not args.crd_file.is_file():
        print(f"error: {args.crd_file}: not found", file=sys.stderr)
        return 2
    crd = yaml.safe_load(args.crd_file.read_text())
    schema = strip_descriptions(served_schema(crd))
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    out = REPO / "tests" / "fixtures" / "prometheus-operator" / args.version
    out.mkdir(parents=True, exist_ok=True)
    target = out / "PodMonitor.schema.json.gz"
    target.write_bytes(gzip.compress(text.encode(), mtime=0))  # the same CRD, the same bytes
    print(f"{target.relative_to(REPO)}: {len(text):,} bytes of schema", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
