#!/usr/bin/env bash
# Validate the Helm chart, the kustomize manifests and the Dockerfile offline; exits non-zero
# on any failure.
#
#   tests/helm/validate.sh [--only chart|kustomize|dockerfile]
#   tests/helm/validate.sh --setup      # only create/update the venv (e.g. before a timed test run)
#
# Needs python3 (3.10+) and, for the kustomize part, kubectl (its built-in kustomize) or a
# standalone kustomize on PATH. The Python tools come from PyPI, pinned by
# tests/helm/requirements.txt, into their own venv at tests/.venv/helm (HELM_VALIDATE_VENV
# overrides it); it is (re)installed only when requirements.txt is newer than the venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${HELM_VALIDATE_VENV:-$root/tests/.venv/helm}"
requirements="$here/requirements.txt"
marker="$venv/.requirements-installed"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ ! -f "$marker" ] || [ "$requirements" -nt "$marker" ]; then
  # A time limit per connection and a bounded retry count, so a dead registry fails fast.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --timeout 60 --retries 2 --requirement "$requirements"
  touch "$marker"
fi

if [ "${1:-}" = "--setup" ]; then
  exit 0
fi
exec "$venv/bin/python" "$here/validate.py" "$@"
