#!/usr/bin/env python3
"""Fails when modules of a crate depend on each other in a cycle.

The rule, for every module P: among P's direct children, "A uses B" (some file under A
names a path under B) must form no cycle. A child naming its own parent's items, or a
parent its children's, is not an edge: that is how a Rust module exposes its parts.
Paths are read from `crate::`, `super::` and `self::` references, `use` trees included.
Items a parent re-exports from a child count as the parent's (a known blind spot).

Usage: scripts/check_module_cycles.py SRC_DIR [SRC_DIR ...]   (each a crate's src/; every
target in it: lib.rs, main.rs, src/bin/*)
"""

import re
import sys
from pathlib import Path

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
USE_STMT = re.compile(r"\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
INLINE_PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def crate_roots(src: Path):
    """The root files of a crate's targets in `src`: lib.rs, main.rs, each src/bin one."""
    roots = [src / name for name in ("lib.rs", "main.rs") if (src / name).exists()]
    roots += sorted((src / "bin").glob("*.rs")) + sorted((src / "bin").glob("*/main.rs"))
    return roots


def module_files(root: Path):
    """Maps each module path (tuple of names) to its file, walking `mod x;` lines."""
    modules = {}

    def walk(path: tuple, file: Path):
        modules[path] = file
        text = file.read_text()
        base = file.parent if file == root or file.name == "mod.rs" else file.with_suffix("")
        for name in MOD_DECL.findall(text):
            for candidate in (base / f"{name}.rs", base / name / "mod.rs"):
                if candidate.exists():
                    walk(path + (name,), candidate)
                    break

    walk((), root)
    return modules


def expand_use(tree: str):
    """`crate::a::{b, c::{d, e}}` -> ["crate::a::b", "crate::a::c::d", "crate::a::c::e"]."""
    tree = re.sub(r"\s+as\s+[A-Za-z_0-9]+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def split_top(s: str):
        parts, depth, start = [], 0, 0
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i])
                start = i + 1
        parts.append(s[start:])
        return [p for p in parts if p]

    def expand(s: str):
        brace = s.find("{")
        if brace < 0:
            return [s]
        prefix, inner = s[:brace], s[brace + 1 : s.rfind("}")]
        out = []
        for part in split_top(inner):
            for tail in expand(part):
                out.append(prefix + tail if tail != "self" else prefix.rstrip(":"))
        return out

    return expand(tree)


def resolve(reference: str, here: tuple, modules: dict):
    """The deepest known module a path names, from the module `here`."""
    names = reference.split("::")
    if names[0] == "crate":
        base, rest = (), names[1:]
    else:
        base = here
        rest = names
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    target = base
    for name in rest:
        if target + (name,) in modules:
            target = target + (name,)
        else:
            break
    return target


def edges_of(modules: dict):
    """(parent, child_a, child_b) -> first "file:line: path" seen for that edge."""
    edges = {}
    for here, file in modules.items():
        lines = file.read_text().splitlines()
        text = "\n".join(lines)
        refs = []
        for m in USE_STMT.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            refs += [(line, r) for r in expand_use(m.group(1))]
        for m in INLINE_PATH.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            refs.append((line, m.group(1)))
        for line, ref in refs:
            if lines[line - 1].lstrip().startswith("//"):
                continue
            target = resolve(ref, here, modules)
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            if common == len(here) or common == len(target):
                continue  # one contains the other
            key = (here[:common], here[common], target[common])
            edges.setdefault(key, f"{file}:{line}: {ref}")
    return edges


def cycles(graph: dict):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main(srcs):
    failed = False
    for root in (root for src in srcs for root in crate_roots(Path(src))):
        src = root
        modules = module_files(root)
        edges = edges_of(modules)
        graphs = {}
        for parent, a, b in edges:
            graphs.setdefault(parent, {}).setdefault(a, set()).add(b)
        for parent in sorted(graphs):
            for component in cycles(graphs[parent]):
                failed = True
                owner = "::".join(("crate",) + parent)
                print(f"{src}: import cycle among the children of {owner}: {component}")
                for a in component:
                    for b in sorted(graphs[parent].get(a, ()) & set(component)):
                        print(f"  {a} -> {b}   ({edges[(parent, a, b)]})")
        print(f"{src}: {len(modules)} modules, {len(edges)} sibling edges checked")
    return 1 if failed else 0


def self_test() -> int:
    """Shows the check can fail: a crate with a cycle fails, the same without it passes."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        (src / "a").mkdir(parents=True)
        (src / "lib.rs").write_text("mod a;\nmod b;\n")
        (src / "a" / "mod.rs").write_text("mod inner;\npub use inner::X;\n")
        (src / "a" / "inner.rs").write_text("use crate::b::{Y, self as bee};\npub struct X;\n")
        (src / "b.rs").write_text("use super::a::X;\npub struct Y;\n")
        with_cycle = main([str(src)])
        (src / "b.rs").write_text("pub struct Y;\n")
        without = main([str(src)])
    if (with_cycle, without) != (1, 0):
        print(f"self-test failed: {with_cycle=} {without=}")
        return 1
    print("self-test: a cycle fails the check, its removal passes")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1:] or ["src"]))
