#!/usr/bin/env python3
"""The CPU guard: counts the instructions of the gateway's hot paths under callgrind
(benches/cpu_guard.rs, through gungraun) and compares them with the committed baseline,
benches/cpu_guard.baseline.json. Fails when one grew by more than the limit (5 %).

    python3 scripts/cpu_guard.py                      # check (scripts/test.sh runs this)
    python3 scripts/cpu_guard.py --update "why"       # a new baseline, with the reason

Updating the baseline is a commit of its own that says why the counts moved. Counts are
of the dev profile, the build the tests already made (docs/benchmarks.md, "The CPU guard").
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "benches" / "cpu_guard.baseline.json"
LIMIT_PERCENT = 5.0


def pinned_gungraun_version():
    manifest = (ROOT / "Cargo.toml").read_text()
    found = re.search(r'^gungraun = "=([0-9.]+)"', manifest, re.MULTILINE)
    if not found:
        sys.exit("cpu_guard: Cargo.toml pins no gungraun version (gungraun = \"=X.Y.Z\")")
    return found.group(1)


def calls_per_benchmark():
    """`CALLS` of benches/cpu_guard.rs: the requests each count covers."""
    source = (ROOT / "benches" / "cpu_guard.rs").read_text()
    found = re.search(r"^const CALLS: usize = ([0-9_]+);", source, re.MULTILINE)
    if not found:
        sys.exit("cpu_guard: benches/cpu_guard.rs has no `const CALLS: usize = N;`")
    return int(found.group(1).replace("_", ""))


def ensure_tools(version):
    """valgrind from the system, and gungraun-runner of the library's exact version."""
    if shutil.which("valgrind") is None:
        sys.exit("cpu_guard: valgrind is needed (Debian: apt-get install valgrind)")
    runner = shutil.which("gungraun-runner")
    current = ""
    if runner:
        current = subprocess.run(
            [runner, "--version"], capture_output=True, text=True, check=False
        ).stdout
    if version not in current.split():
        subprocess.run(
            ["cargo", "install", "gungraun-runner", "--version", version, "--locked"],
            check=True,
        )


def run_benchmarks():
    """{benchmark id: instructions} of this tree, from gungraun's JSON lines."""
    subprocess.run(["cargo", "build", "-p", "fixture-servers", "--bins"], cwd=ROOT, check=True)
    done = subprocess.run(
        [
            "cargo", "bench", "--profile", "dev", "--bench", "cpu_guard", "--",
            "--output-format=json",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    counts = {}
    for line in done.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        summary = json.loads(line)
        counts[summary["id"]] = instructions_of(summary)
    if done.returncode != 0 or not counts:
        sys.exit(f"cpu_guard: the benchmarks failed (exit {done.returncode}); output:\n{done.stdout}")
    return counts


def instructions_of(summary):
    """The total Ir of one benchmark's callgrind profile."""
    for profile in summary["profiles"]:
        if profile["tool"] == "Callgrind":
            return int(profile["data"]["total"]["metrics"]["Ir"]["values"]["new"])
    raise ValueError(f"no callgrind profile in {summary.get('id')}")


def machine():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout
    return {"cpu": cpu, "valgrind": valgrind.strip(), "arch": platform.machine()}


def commit():
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def compare(baseline, counts):
    """Prints the table; returns the benchmarks over the limit."""
    calls = baseline.get("calls", 1)
    print(f"{'benchmark':<14} {'baseline':>13} {'now':>13} {'change':>8}  per request")
    over = []
    for name in sorted(set(baseline["counts"]) | set(counts)):
        before, now = baseline["counts"].get(name), counts.get(name)
        if before is None or now is None:
            print(f"{name:<14} {before!s:>13} {now!s:>13}   (not in both: update the baseline)")
            over.append(name)
            continue
        change = (now - before) * 100.0 / before
        flag = "  OVER THE LIMIT" if change > LIMIT_PERCENT else ""
        print(
            f"{name:<14} {before:>13,} {now:>13,} {change:>+7.2f}%  "
            f"{before // calls:,} -> {now // calls:,}{flag}"
        )
        if change > LIMIT_PERCENT:
            over.append(name)
    return over


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", metavar="WHY", help="write a new baseline, saying why")
    args = parser.parse_args()

    ensure_tools(pinned_gungraun_version())
    counts = run_benchmarks()
    if args.update:
        BASELINE.write_text(
            json.dumps(
                {
                    "why": args.update,
                    "measured_on_commit": commit(),
                    "machine": machine(),
                    "calls": calls_per_benchmark(),
                    "limit_percent": LIMIT_PERCENT,
                    "counts": counts,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"cpu_guard: wrote {BASELINE.relative_to(ROOT)}; commit it with the reason")
        for name, count in sorted(counts.items()):
            print(f"  {name}: {count:,}")
        return
    baseline = json.loads(BASELINE.read_text())
    here = machine()
    if here["cpu"] != baseline["machine"]["cpu"]:
        # glibc picks memcpy and friends by CPU: counts may move a little on another model.
        print(f"cpu_guard: note: baseline measured on {baseline['machine']['cpu']}, this is {here['cpu']}")
    over = compare(baseline, counts)
    if over:
        print(
            f"cpu_guard: FAILED: {', '.join(over)} grew by more than {LIMIT_PERCENT} % "
            f"(baseline: {baseline['why']}). If the growth is meant, run "
            '`python3 scripts/cpu_guard.py --update "why"` and commit the baseline on its own.'
        )
        sys.exit(1)
    print(f"cpu_guard: every count within {LIMIT_PERCENT} % of the baseline")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
