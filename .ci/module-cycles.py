#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

Usage: module-cycles.py [CRATES_DIR]   (default: crates)

For every crate under CRATES_DIR, each file of its `src/` is a module (`foo.rs` and `foo/mod.rs`
are module `foo`). An edge A -> B is any path in A's code that names something in B:
`use crate::b::…`, `use super::…`, `use self::…`, and paths such as `crate::b::f(…)` in the code
(`pub use` re-exports count too: a parent that re-exports a child's name depends on the child).
A path resolves to the deepest module it names. Declaring a child (`mod b;`) is not an edge.
Test modules (`#[cfg(test)] mod … { … }`) and comments are left out. Any strongly connected set
of two or more modules is printed, with the imports that tie it, and the exit status is 1.

Why a script of our own: it needs nothing but Python, reads the code as it is, and runs in a
second; the structure it enforces is the one ARCHITECTURE.md describes (each layer imports only
the ones below it).
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{", re.S)
# `use child::…` / `pub use child::{…}`: a path that starts with a child module's name.
BARE_USE = re.compile(r"\buse\s+([A-Za-z_][A-Za-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?")


def blank(src):
    """Comments and string literals become spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src[i] == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src[i] == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", src[i:j + 1]))
            i = j + 1
        elif src[i] == "'" and i + 2 < n and (src[i + 1] == "\\" or src[i + 2] == "'"):
            j = src.find("'", i + 2) if src[i + 1] != "\\" else src.find("'", i + 3)
            j = n if j < 0 else j
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def strip_test_modules(src):
    """Removes `#[cfg(test)] mod name { … }` blocks (already blanked of comments/strings)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", src)
        if not m:
            return src
        depth, i = 0, m.end() - 1
        while i < len(src):
            if src[i] == "{":
                depth += 1
            elif src[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        src = src[:m.start()] + re.sub(r"[^\n]", " ", src[m.start():i + 1]) + src[i + 1:]


def modules_of(src_dir):
    """Module path (tuple) -> file, for every .rs file under src_dir."""
    mods = {}
    for dirpath, _, files in os.walk(src_dir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src_dir)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            mods[tuple(parts)] = os.path.join(dirpath, f)
    return mods


def resolve(mods, here, kind, segments):
    """The deepest module a path names, from module `here`."""
    if kind == "crate":
        base = ()
    elif kind == "self":
        base = here
    else:  # super, possibly repeated
        base = here[:-1]
        while segments and segments[0] == "super":
            base = base[:-1]
            segments = segments[1:]
    path = base + tuple(segments)
    while path and path not in mods:
        path = path[:-1]
    return path


def edges_of(mods, here, code):
    found = {}
    for m in PATH.finditer(code):
        # `use crate::a::{b, c}` names a::b and a::c, not `a` itself: the group is resolved name
        # by name below (a `self` in it still names `a`).
        if code.startswith("::{", m.end()):
            continue
        segments = [s for s in m.group(2).split("::") if s]
        target = resolve(mods, here, m.group(1), segments)
        if target != here:
            found.setdefault(target, m.group(0))
    # `use super::{a, b::c}`: each name in the group.
    for m in USE_GROUP.finditer(code):
        start = m.end()
        depth, i = 1, start
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        prefix = [s for s in m.group(2).split("::") if s]
        for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*", code[start:i - 1]):
            segments = prefix + name.split("::")
            target = resolve(mods, here, m.group(1), segments)
            if target != here:
                found.setdefault(target, m.group(1) + "::" + "::".join(segments))
    for m in BARE_USE.finditer(code):
        first = m.group(1)
        if first in ("crate", "super", "self") or here + (first,) not in mods:
            continue
        prefix = [first] + [s for s in m.group(2).split("::") if s]
        names = [[]]
        if m.group(3):
            depth, i = 1, m.end()
            while i < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[i], 0)
                i += 1
            group = code[m.end():i - 1]
            names = [n.split("::") for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*", group)]
        for name in names:
            target = resolve(mods, here, "self", prefix + name)
            if target != here:
                found.setdefault(target, "::".join(prefix + name))
    return found


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates"
    failed = False
    for crate in sorted(os.listdir(root)):
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        mods = modules_of(src)
        graph, why = {}, {}
        for here, path in mods.items():
            code = strip_test_modules(blank(open(path, encoding="utf-8").read()))
            found = edges_of(mods, here, code)
            graph[here] = set(found)
            for target, text in found.items():
                why[(here, target)] = text
        name = lambda m: "::".join(m) or "(crate root)"
        for comp in cycles(graph):
            failed = True
            members = set(comp)
            print(f"{crate}: modules import each other in a circle: " + ", ".join(sorted(name(m) for m in comp)))
            for a in sorted(comp):
                for b in sorted(graph[a] & members):
                    print(f"  {name(a)} -> {name(b)}  ({why[(a, b)]})")
    if failed:
        sys.exit(1)
    print("no module cycle in any crate")


if __name__ == "__main__":
    main()
