#!/usr/bin/env bash
# Headless Chromium for the tree explorer's browser test and benchmark (tests/browser.py,
# benchmarks/explorer_open.py): Debian's `chromium` package, which Playwright drives as it
# is (it downloads no browser of its own).  Idempotent: a Chromium already on the PATH (or
# named by $CHROMIUM) is kept.  Needs root (or sudo) and Debian's package mirror.
#
#     scripts/install-chromium.sh        # or: make chromium
set -euo pipefail
found="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [ -n "$found" ] && [ -x "$found" ]; then
    echo "chromium: $found ($("$found" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "error: installing chromium needs root: run 'apt-get install -y chromium' as root" >&2
        exit 1
    fi
    sudo="sudo"
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: no apt-get here: install Chromium with this system's packages and set CHROMIUM=/path/to/it" >&2
    exit 1
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
echo "chromium: $(command -v chromium) ($(chromium --version 2>/dev/null || echo 'version unknown'))"
