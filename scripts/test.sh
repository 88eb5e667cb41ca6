#!/usr/bin/env bash
# The one test command: installs the pinned test peers, then runs every test.
# Usage: scripts/test.sh [extra cargo-nextest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools a plain Rust + Node + Python machine lacks: the test runner, Redis (the tests
# start their own redis-server processes on free ports), strace, and Debian's headless
# Chromium with its WebDriver (the console's tests, tests/integration/console.rs).
if ! command -v cargo-nextest >/dev/null; then
  cargo install cargo-nextest --locked
fi
# strace watches the real host in tests/integration/hosts.rs (nothing beyond loopback).
# Each is "command:package".
# valgrind counts the instructions of the CPU guard (scripts/cpu_guard.py).
for tool in redis-server:redis-server strace:strace chromium:chromium chromedriver:chromium-driver valgrind:valgrind; do
  package="${tool#*:}"
  tool="${tool%%:*}"
  if ! command -v "$tool" >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update && apt-get install -y "$package"
    elif command -v apt-get >/dev/null && command -v sudo >/dev/null; then
      sudo apt-get update && sudo apt-get install -y "$package"
    else
      echo "$tool is needed by the tests; install it with your package manager" >&2
      exit 1
    fi
  fi
done

# npm test peers (server-everything, the TypeScript SDK, Gemini CLI, Claude Code), pinned by
# tests/package-lock.json.
if [ ! -d tests/node_modules ] || [ tests/package-lock.json -nt tests/node_modules/.package-lock.json ]; then
  npm ci --prefix tests --no-audit --no-fund
fi

# PyPI test peers, pinned by tests/requirements.txt, in a venv of their own.
if [ -f tests/requirements.txt ]; then
  if [ ! -x tests/.venv/bin/python ]; then
    python3 -m venv tests/.venv
  fi
  if [ tests/requirements.txt -nt tests/.venv/.installed ]; then
    tests/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
    touch tests/.venv/.installed
  fi
  export PATH="$PWD/tests/.venv/bin:$PATH"
fi

# The chart test's Python tools (helm-python-sdk, kubernetes-validate), installed here so
# that the timed test does not spend its time on pip.
tests/helm/validate.sh --setup

# The fixture servers the tests start (crates/fixture-servers), built before the timed
# tests; a test builds one itself only when it is missing or older than its sources.
cargo build -p fixture-servers --bins

# Every crate of the workspace: the protocol crate has its own unit tests.
cargo nextest run --workspace --no-fail-fast "$@"

# The CPU guard: the hot paths' instruction counts against benches/cpu_guard.baseline.json
# (installs gungraun-runner at the pinned version; docs/benchmarks.md, "The CPU guard").
python3 scripts/cpu_guard.py
