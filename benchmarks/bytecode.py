"""What a process pays at start to import the stack from source rather than from bytecode.

Every Ray worker, Serve replica and job process imports Ray and often torch.  With
PYTHONDONTWRITEBYTECODE set, Python never writes the compiled modules, so each of those
processes compiles the same sources again.  This times the imports in fresh processes both
ways, with the bytecode under a private PYTHONPYCACHEPREFIX (the venv's own __pycache__
folders are not read), and prints the CPU seconds (user + system) of each, medians of
`--repeats` runs.  The last line: import_cpu_ratio=<compiled from source / from bytecode>.

    python -m benchmarks.bytecode [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

MODULES = ("ray", "ray.data", "ray.serve", "torch", "transformers")


def import_cpu_s(module: str, prefix: str, *, write: bool) -> float:
    """CPU seconds of a new interpreter that imports `module`, bytecode under `prefix`."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": prefix}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--repeats", type=int, default=5)
    repeats = args.parse_args(argv).repeats
    print(f"{'module':<14} {'from source s':>14} {'from bytecode s':>16} {'ratio':>6}")
    totals = [0.0, 0.0]
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as warm:
        for module in MODULES:
            import_cpu_s(module, warm, write=True)  # writes its bytecode once
            source = statistics.median(
                import_cpu_s(module, empty, write=False) for _ in range(repeats)
            )
            cached = statistics.median(
                import_cpu_s(module, warm, write=True) for _ in range(repeats)
            )
            totals = [totals[0] + source, totals[1] + cached]
            print(f"{module:<14} {source:>14.2f} {cached:>16.2f} {source / cached:>6.2f}")
    print(f"import_cpu_ratio={totals[0] / totals[1]:.2f}")


if __name__ == "__main__":
    main()
