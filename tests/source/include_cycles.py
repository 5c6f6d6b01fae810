#!/usr/bin/env python3
"""No two files include each other, directly or through their own header: a header and its .cpp
(the same path without the extension; include/mixtrain/X and src/X are one) are one unit, and no
unit includes a unit that includes it back. Such a pair is one concept split in two or two
concepts tangled; break it by moving the shared part down (a header of its own) or the part
that needs both up (a file of its own that nothing includes).

  include_cycles.py SOURCE_DIR          checks src/ and include/mixtrain/, prints each pair
  include_cycles.py --self-test         the check on made-up trees: finds a pair, accepts a chain
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def unit_of(path):
    """src/train/recipe.cpp, include/mixtrain/train/recipe.h -> train/recipe."""
    for prefix in ("include/mixtrain/", "src/"):
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    return os.path.splitext(path)[0]


def resolve(including, name, exists):
    """The file a quoted include names, as the compiler finds it: beside the including file,
    then under include/ and src/; None for one outside the tree (a system or generated header)."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(including), name)),
                 os.path.join("include", name), os.path.join("src", name)):
        if cand in exists:
            return cand
    return None


def cycles(files):
    """files: {path: text}. Returns sorted ((unit_a, unit_b), (a_file, a_line), (b_file, b_line))."""
    exists = set(files)
    edges = {}  # (unit, unit) -> first (file, line) that makes it
    for path, text in files.items():
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(path, m.group(1), exists)
            if target is None:
                continue
            a, b = unit_of(path), unit_of(target)
            if a != b:
                edges.setdefault((a, b), (path, n))
    out = []
    for (a, b), where in edges.items():
        if a < b and (b, a) in edges:
            out.append(((a, b), where, edges[(b, a)]))
    return sorted(out)


def read_tree(root):
    files = {}
    for top in ("src", "include/mixtrain"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith((".h", ".cpp")):
                    full = os.path.join(d, name)
                    with open(full, encoding="utf-8", errors="replace") as f:
                        files[os.path.relpath(full, root)] = f.read()
    return files


def self_test():
    tangled = {
        "src/train/a.cpp": '#include "mixtrain/train/a.h"\n#include "train/b.h"\n',
        "include/mixtrain/train/a.h": "#pragma once\n",
        "src/train/b.h": '#pragma once\n#include "mixtrain/train/a.h"\n',
        "src/train/b.cpp": '#include "train/b.h"\n',
    }
    chain = {
        "src/x/a.cpp": '#include "x/b.h"\n',
        "src/x/b.h": '#include "x/c.h"\n',
        "src/x/c.h": "#include <vector>\n",
        "src/x/c.cpp": '#include "c.h"\n',
    }
    found = cycles(tangled)
    ok = len(found) == 1 and found[0][0] == ("train/a", "train/b") and cycles(chain) == []
    return ok


def main(argv):
    if argv[1:] == ["--self-test"]:
        ok = self_test()
        print("the cycle check finds a tangled pair and accepts a chain" if ok else "FAIL: the cycle check's self-test")
        return 0 if ok else 1
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = cycles(read_tree(argv[1]))
    for (a, b), (fa, la), (fb, lb) in found:
        print(f"FAIL: {a} and {b} include each other: {fa}:{la} and {fb}:{lb}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
