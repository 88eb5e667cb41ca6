#!/usr/bin/env python3
"""Figures for ARCHITECTURE.md's record of the house: per crate, its lines, files and
`pub` items against narrower ones; the largest files; the longest functions.

Reads rustfmt-formatted sources, no build: a function ends at the first `}` at its own
indentation. Test code (`tests.rs`, `tests/`, `contract_tests/`, `#[cfg(test)]` modules)
is left out of the function list, as the 80-line rule leaves it out.

Usage: scripts/house_stats.py [--top N]
"""

import argparse
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

ITEM = r"(?:async\s+)?(?:unsafe\s+)?(?:fn|struct|enum|trait|type|const|static|mod|use)\b"
PUB = re.compile(rf"^\s*pub\s+{ITEM}")
FIELD = re.compile(r"^\s*pub\s+(?:r#)?\w+\s*:")
NARROW = re.compile(rf"^\s*pub\((?:crate|super|in [^)]*)\)\s+(?:{ITEM}|(?:r#)?\w+\s*:)")
FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
TEST_MOD = re.compile(r"^(\s*)#\[cfg\(test\)\]")


def crates():
    """(name, source folder) of the root package and every workspace member."""
    root = tomllib.loads((ROOT / "Cargo.toml").read_text())
    yield root["package"]["name"], ROOT / "src"
    for member in root.get("workspace", {}).get("members", []):
        manifest = tomllib.loads((ROOT / member / "Cargo.toml").read_text())
        yield manifest["package"]["name"], ROOT / member / "src"


def is_test_file(path):
    parts = set(path.parts)
    return path.name == "tests.rs" or "tests" in parts or "contract_tests" in parts


def functions(path):
    """(name, first line, length) of every non-test function with a body in one file."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        test = TEST_MOD.match(lines[i])
        if test:
            i = closing(lines, i + 1, test.group(1)) + 1
            continue
        m = FN.match(lines[i])
        if m:
            # The signature ends at the first line ending in `{` (a body) or `;` (none).
            sig = i
            while sig < len(lines) and not lines[sig].rstrip().endswith(("{", ";", "}")):
                sig += 1
            if sig < len(lines) and lines[sig].rstrip().endswith("{"):
                end = closing(lines, sig + 1, m.group(1))
                found.append((m.group(2), i + 1, end - i + 1))
        i += 1
    return found


def closing(lines, start, indent):
    """The index of the first line from `start` that closes a block opened at `indent`."""
    for j in range(start, len(lines)):
        if lines[j].startswith(indent + "}"):
            return j
    return len(lines) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()

    sizes, fns = [], []
    print("| crate | files | lines | `pub` items and fields | `pub(crate)`/`pub(super)` |")
    print("|---|---|---|---|---|")
    for name, src in crates():
        files = sorted(src.rglob("*.rs"))
        total = pub = narrow = 0
        for path in files:
            text = path.read_text().splitlines()
            total += len(text)
            pub += sum(1 for line in text if PUB.match(line) or FIELD.match(line))
            narrow += sum(1 for line in text if NARROW.match(line))
            rel = path.relative_to(ROOT)
            sizes.append((len(text), str(rel)))
            if not is_test_file(rel):
                fns.extend((length, f"{rel}:{line}", fn) for fn, line, length in functions(path))
        print(f"| {name} | {len(files)} | {total} | {pub} | {narrow} |")

    print(f"\nLargest files (top {args.top}):")
    for lines, path in sorted(sizes, reverse=True)[: args.top]:
        print(f"  {lines:5} {path}")
    long = sorted(fns, reverse=True)
    print(f"\nFunctions over 80 lines, tests left out: {sum(1 for f in long if f[0] > 80)}")
    for length, where, fn in long[: args.top]:
        print(f"  {length:4} {fn} ({where})")


if __name__ == "__main__":
    main()
