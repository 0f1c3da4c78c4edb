#!/usr/bin/env bash
# Create .venv and install mmgrid into it. Idempotent: a second run only checks.
#
# torch is installed *before* anything that depends on it, pinned to 2.13.0:
#   - on a machine with a local CPU wheel (pip find-links), that wheel is used;
#   - elsewhere pip's default index serves the CUDA build for Linux GPU hosts.
# Set MMGRID_TORCH="torch==X.Y.Z --index-url ..." to choose another build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
TORCH_SPEC="${MMGRID_TORCH:-torch==2.13.0}"
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  "$VPY" -m pip install --quiet $TORCH_SPEC
fi
EXTRAS="${MMGRID_EXTRAS:-dev,ray,mlflow}"
stamp=".venv/.mmgrid-installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${EXTRAS//,/_}"
if [ ! -f "$stamp" ]; then
  "$VPY" -m pip install --quiet -e ".[${EXTRAS}]"
  touch "$stamp"
fi
# A headless browser for the report page's test (tests/sweep/test_report_browser.py): Debian's chromium
# and chromium-driver, installed where this script runs as root with apt-get (CI, the developers'
# machines); elsewhere, or with MMGRID_NO_BROWSER=1, nothing is installed and that test skips, saying why.
if [ -z "${MMGRID_NO_BROWSER:-}" ] && ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if timeout 900 bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver" \
        >/tmp/mmgrid-setup-browser.log 2>&1; then
      echo "browser: $(chromium --version 2>/dev/null | head -1) with chromedriver, for the report page's test"
    else
      echo "browser: apt-get install chromium chromium-driver failed (/tmp/mmgrid-setup-browser.log); the report page's browser test will skip"
    fi
  else
    echo "browser: no chromedriver and not root with apt-get: the report page's browser test will skip (install chromium and chromium-driver to run it)"
  fi
fi
"$VPY" -c "import torch, mmgrid; print(f'mmgrid {mmgrid.__version__} ready (torch {torch.__version__}, cuda={torch.cuda.is_available()})')"
