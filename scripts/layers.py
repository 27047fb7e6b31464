#!/usr/bin/env python3
"""The crate's one layering rule, checked: imports point down.

Reads the layer table from DESIGN.md (the fenced block that starts with `layers`), draws the
import graph of `src/` from its `use` lines and the `crate::` / `super::` / `self::` paths in its
code (comments and string literals left out), and fails when

- a module is in no layer (a new file must be placed),
- an import points from a lower layer up to a higher one, or
- imports form a cycle (within a layer, sideways imports are fine as long as none comes back).

It also checks the second rule, one name, one meaning: a struct, enum, trait or union name defined
twice in `src/` outside `#[cfg(test)]` modules fails, unless DESIGN.md's ```names block allows it
(one name a line, with a `#` reason).

A path is followed through re-exports to the module that defines the item, so `use
super::KeyedError` in `keyed/table.rs` is an import of the module that defines `KeyedError`. A
folder's `mod.rs` (and `lib.rs`) re-exporting its own children is the folder's facade, not an
import. Any other public re-export that points up must be listed under `exempt` in the table, with
the public path it keeps.

    python3 scripts/layers.py            check; print every violation; exit 1 if any
    python3 scripts/layers.py --graph    print the module graph (module -> what it imports)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
SRC = os.path.join(ROOT, "src")


def read_table():
    text = open(os.path.join(ROOT, "DESIGN.md")).read()
    m = re.search(r"```layers\n(.*?)```", text, re.S)
    if not m:
        sys.exit("layers.py: DESIGN.md has no ```layers block")
    layers, exempt, level = {}, set(), None
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("exempt"):
            # exempt: from -> to
            a, b = line.split(":", 1)[1].split("->")
            exempt.add((a.strip(), b.strip()))
            continue
        head = re.match(r"(\d+):", line)
        if head:
            level, line = int(head.group(1)), line[head.end():]
        for mod in line.split():
            layers[mod] = level
    return layers, exempt


def read_names():
    """The names DESIGN.md's ```names block allows to be defined more than once."""
    text = open(os.path.join(ROOT, "DESIGN.md")).read()
    m = re.search(r"```names\n(.*?)```", text, re.S)
    if not m:
        sys.exit("layers.py: DESIGN.md has no ```names block")
    return {w for line in m.group(1).splitlines() for w in line.split("#", 1)[0].split()}


def modpath(f):
    rel = os.path.relpath(f, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


def name(mod):
    return "::".join(mod) or "lib"


def strip(text):
    """The code with comments and string literals blanked out."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i)
            j = n if j < 0 else j + 2
            # Keep the lines, so that a position's line number is the file's.
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i : i + 12])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\[^']*|[^\\'])'", text[i : i + 12])
            if m:
                i += len(m.group(0))
                out.append("' '")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def expand(tree):
    """A use tree (`a::{b, c::{d as e}}`) as (path segments, alias) pairs."""
    tree = re.sub(r"\s+", " ", tree).strip()
    res = []

    def rec(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            cur += ch
        if cur.strip():
            parts.append(cur)
        for p in parts:
            p = p.strip()
            if "{" in p:
                k = p.index("{")
                head = [x.strip() for x in p[:k].split("::") if x.strip()]
                rec(prefix + head, p[k + 1 : p.rindex("}")])
            else:
                alias = None
                if " as " in p:
                    p, alias = [x.strip() for x in p.split(" as ", 1)]
                segs = [x.strip() for x in p.split("::") if x.strip()]
                if segs:
                    res.append((prefix + segs, alias or segs[-1]))

    rec([], tree)
    return res


def inline_blocks(code):
    """A file's inline `mod x { .. }` blocks, in order: (opening brace, closing brace, name,
    whether it is compiled for tests only)."""
    opens = {}
    for mo in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        # `#[cfg(test)]` or `#[cfg(all(test, ..))]` right before it (and its `pub`, if any).
        before = code[max(0, mo.start() - 200) : mo.start()]
        attr = re.search(r"#\[cfg\(([^\]]*)\)\]\s*(?:pub(?:\s*\([^)]*\))?\s+)?$", before)
        cond = attr.group(1) if attr else ""
        tests = bool(re.search(r"\btest\b", cond)) and not re.search(
            r"\b(?:not|any)\s*\(\s*test\b", cond
        )
        opens[mo.end() - 1] = (mo.group(1), tests)
    blocks, stack = [], []
    for i, ch in enumerate(code):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            j = stack.pop()
            if j in opens:
                blocks.append((j, i) + opens[j])
    return sorted(blocks)


def inline_depths(code):
    """A function from a position in a file's code to how many inline `mod x {` blocks hold it."""
    blocks = inline_blocks(code)

    def depth_at(pos):
        return sum(1 for a, b, _, _ in blocks if a < pos < b)

    return depth_at


ITEM = re.compile(
    r"(?m)^[ \t]*(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?(struct|enum|trait|union)\s+([A-Z]\w*)"
)


def duplicate_names(crate):
    """Every type name defined in more than one module, inline modules compiled for tests only
    left out: name -> [(file, line)]. Two definitions in one module are `cfg` alternatives (the
    compiler allows no other kind): one meaning."""
    seen = {}
    for m, code in crate.code.items():
        blocks = inline_blocks(code)
        for mo in ITEM.finditer(code):
            holders = [blk for blk in blocks if blk[0] < mo.start() < blk[1]]
            if any(tests for _, _, _, tests in holders):
                continue
            where = (m, tuple(name for _, _, name, _ in holders))
            line = code.count("\n", 0, mo.start()) + 1
            seen.setdefault(mo.group(2), {}).setdefault(where, (crate.files[m], line))
    return {k: sorted(v.values()) for k, v in seen.items() if len(v) > 1}


class Crate:
    def __init__(self):
        self.files = {}
        for d, _, fs in os.walk(SRC):
            for f in fs:
                if f.endswith(".rs"):
                    path = os.path.join(d, f)
                    self.files[modpath(path)] = path
        self.code = {m: strip(open(p).read()) for m, p in self.files.items()}
        self.is_dir = {
            m: os.path.basename(p) in ("mod.rs", "lib.rs") for m, p in self.files.items()
        }
        self.depths = {m: inline_depths(code) for m, code in self.code.items()}
        # Every `use` of a module: (segments, alias, visibility, position).
        self.uses = {}
        for m, code in self.code.items():
            found = []
            for u in re.finditer(r"(?:\b(pub(?:\s*\([^)]*\))?)\s+)?\buse\s+([^;]*);", code):
                vis = re.sub(r"\s+", "", u.group(1) or "")
                if re.search(r"#\[cfg\(doc\)\]\s*$", code[: u.start()]):
                    # Brought in for the docs' links only: not a dependency of the code.
                    continue
                for segs, alias in expand(u.group(2)):
                    found.append((segs, alias, vis, u.start()))
            self.uses[m] = found

    def base(self, mod, segs, depth=0):
        """Where a path starts, and the rest of it; None for an external path. `depth` is how
        many inline `mod x { .. }` blocks the path sits in (their code counts as the file's)."""
        if not segs:
            return None
        head = segs[0].lstrip("$")
        if head == "crate":
            return (), segs[1:]
        if head == "self":
            return mod, segs[1:]
        if head == "super":
            k = 0
            while k < len(segs) and segs[k] == "super":
                k += 1
            up = max(0, k - depth)
            return mod[: len(mod) - up], segs[k:]
        if mod + (head,) in self.files:
            # A child module named without `self::`, as `lib.rs` names its modules.
            return mod, segs
        return None

    def resolve(self, mod, segs, inline=0, hops=0):
        """The module that defines what a path names."""
        start = self.base(mod, segs, inline)
        if start is None or hops > 20:
            return None
        m, rest = start
        while rest and m + (rest[0],) in self.files:
            m, rest = m + (rest[0],), rest[1:]
        if not rest or rest[0] == "*" or rest[0] == "self":
            return m
        # Follow a re-export of the next name.
        depth = self.depths.get(m)
        for segs2, alias, vis, at in self.uses.get(m, []):
            # Only a re-export (a `pub` use at the file's top level) is seen from outside.
            if alias == rest[0] and vis.startswith("pub") and depth(at) == 0:
                target = self.resolve(m, segs2, 0, hops + 1)
                if target is not None:
                    return target
        return m

    def graph(self):
        """module -> {imported module: [why]} and the facade re-exports left out."""
        edges = {}
        for m, code in self.code.items():
            out = edges.setdefault(m, {})
            depth = self.depths[m]
            for segs, alias, vis, at in self.uses[m]:
                t = self.resolve(m, segs, depth(at))
                if t is None or t == m:
                    continue
                # A module re-exporting what its own children define: its facade.
                facade = vis.startswith("pub") and t[: len(m)] == m
                if facade:
                    continue
                why = "pub use" if vis == "pub" else "use"
                out.setdefault(t, []).append("%s %s" % (why, "::".join(segs)))
            # Paths in code outside `use` lines.
            code_wo_uses = re.sub(r"\buse\s+[^;]*;", lambda u: " " * len(u.group(0)), code)
            for p in re.finditer(r"(?<![\w:])(\$?(?:crate|super|self)(?:::\w+)+)", code_wo_uses):
                segs = p.group(1).split("::")
                t = self.resolve(m, segs, depth(p.start()))
                if t is None or t == m:
                    continue
                out.setdefault(t, []).append("path " + p.group(1))
        return edges


def unit_of(layers, mod):
    """The table's entry a module belongs to: its nearest listed self or parent."""
    for k in range(len(mod), -1, -1):
        key = name(mod[:k]) if k else "lib"
        if key in layers:
            return key
    return None


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main():
    crate = Crate()
    edges = crate.graph()
    if "--graph" in sys.argv:
        for m in sorted(edges, key=name):
            print(name(m), "->", " ".join(sorted(name(t) for t in edges[m])))
        return 0
    layers, exempt = read_table()
    problems = []
    for m in sorted(crate.files, key=name):
        if unit_of(layers, m) is None:
            problems.append("%s: in no layer (place it in DESIGN.md's table)" % name(m))
    # The graph between the table's units; imports within a unit are its own business.
    units = {}
    for m, targets in edges.items():
        um = unit_of(layers, m)
        for t, why in targets.items():
            ut = unit_of(layers, t)
            if um is None or ut is None or um == ut or (um, ut) in exempt:
                continue
            units.setdefault(um, {}).setdefault(ut, []).extend(
                "%s: %s" % (name(m), w) for w in why
            )
    for um in sorted(units):
        for ut, why in sorted(units[um].items()):
            if layers[ut] > layers[um]:
                problems.append(
                    "%s (layer %d) imports %s (layer %d) upward: %s"
                    % (um, layers[um], ut, layers[ut], "; ".join(sorted(set(why))[:3]))
                )
    for comp in cycles(units):
        detail = []
        for a in comp:
            for b in comp:
                if b in units.get(a, {}):
                    detail.append("%s -> %s (%s)" % (a, b, sorted(set(units[a][b]))[0]))
        problems.append("import cycle: %s\n    %s" % (" ".join(comp), "\n    ".join(detail)))
    allowed = read_names()
    dups = duplicate_names(crate)
    for n in sorted(dups):
        if n in allowed:
            continue
        where = ", ".join(
            "%s:%d" % (os.path.relpath(f, ROOT), line) for f, line in sorted(dups[n])
        )
        problems.append("type name %s defined %d times: %s" % (n, len(dups[n]), where))
    for n in sorted(allowed - set(dups)):
        problems.append("type name %s is allowed in DESIGN.md but not defined twice: drop it" % n)
    for p in problems:
        print(p)
    if problems:
        print(
            "layers.py: %d problem(s); the rules are in DESIGN.md, \"Layers\" and"
            " \"One name, one meaning\"" % len(problems)
        )
        return 1
    print(
        "layers.py: %d modules in %d units, %d imports between units, all pointing down;"
        " %d type names, each defined once (but %s, allowed in DESIGN.md)"
        % (
            len(crate.files),
            len(set(layers)),
            sum(len(v) for v in units.values()),
            len({mo.group(2) for c in crate.code.values() for mo in ITEM.finditer(c)}),
            ", ".join(sorted(allowed)) or "none",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
