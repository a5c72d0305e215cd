#!/usr/bin/env python3
# apps/scripts/layout_check.py: the house rules a reader relies on, checked from the source tree.
#
#   python3 apps/scripts/layout_check.py [--root DIR] {dist-budget,flag-words,include-cycles,all}
#
#   dist-budget     dist/'s top level (the teaching text) holds at most 1,200 lines of code - non-blank,
#                   non-comment lines: comments that say why are free - and includes its sub-folders
#                   only downward: a file in a sub-folder includes from the top level only
#                   dist/communicator.h, the interface every transport and layer is written against.
#   flag-words      no library folder names a flag of the apps ("--checkpoint-dir"): library errors
#                   name library options, and the apps translate them into flag words
#                   (apps/trainer/run/flag_words.h). Flags are what the apps' sources write as "--name".
#   include-cycles  no unit-level include cycle in the library folders or apps/ (a unit is a file's
#                   path without its extension: x.h and x.cpp are one unit), and the apps' layers
#                   include only downward: apps/trainer/step/ (the Step) never includes
#                   apps/trainer/run/ (the run harness), and apps/trainer/ never a trainer's own folder.
# Exits 0 when every asked check holds, 1 with one line per problem otherwise (ctest: layout_*).
import argparse
import os
import re
import sys

LIBRARIES = ["core", "layers", "checkpoint", "optim", "dist", "data"]
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh")
DIST_BUDGET = 1200  # DESIGN.md: dist/'s top level reads top to bottom; code lines, comments free
DIST_ROOT_FOR_SUBFOLDERS = {"dist/communicator.h"}  # what a dist/ sub-folder may include upward
# (a folder, the folders above it that it must not include): the Step is below the run harness, and
# both are below the two trainers that use them.
APPS_DOWNWARD = [("apps/trainer/step/", ["apps/trainer/run/", "apps/train/", "apps/encoder/"]),
                 ("apps/trainer/run/", ["apps/train/", "apps/encoder/"])]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root, folders):
    for folder in folders:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def code_lines(text):
    """Non-blank lines that are not only comment (// lines and /* */ blocks)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("//"))


def check_dist_budget(root):
    problems = []
    top = [f for f in sources(root, ["dist"]) if os.path.dirname(f) == "dist"]
    total = sum(code_lines(read(root, f)) for f in top)
    print(f"dist/ top level: {total} lines of code in {len(top)} files (budget {DIST_BUDGET})")
    if total > DIST_BUDGET:
        problems.append(f"dist/ top level has {total} lines of code, over the budget of {DIST_BUDGET}")
    for f in sources(root, ["dist"]):
        if os.path.dirname(f) == "dist":
            continue
        for n, line in enumerate(read(root, f).splitlines(), 1):
            m = INCLUDE.match(line)
            if m and os.path.dirname(m.group(1)) == "dist" and m.group(1) not in DIST_ROOT_FOR_SUBFOLDERS:
                problems.append(f"{f}:{n}: a dist/ sub-folder includes the top level's {m.group(1)} "
                                "(only dist/communicator.h may be included upward)")
    return problems


FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])")
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def app_flags(root):
    flags = set()
    for f in sources(root, ["apps"]):
        for lit in STRING.findall(read(root, f)):
            flags.update(FLAG.findall(lit))
    return flags


def words_of(line):
    """The parts of a line a reader reads as words: string literals and the comment."""
    code, _, comment = line.partition("//")
    return " ".join(STRING.findall(code)) + " " + comment


def check_flag_words(root):
    flags = app_flags(root)
    problems = []
    for f in sources(root, LIBRARIES):
        for n, line in enumerate(read(root, f).splitlines(), 1):
            named = sorted({x for x in FLAG.findall(words_of(line)) if x in flags})
            if named:
                problems.append(f"{f}:{n}: names the apps' flag(s) " + ", ".join("--" + x for x in named))
    print(f"flag words: {len(flags)} app flags, {len(problems)} library lines naming one")
    return problems


def unit(path):
    return os.path.splitext(path)[0]


def include_graph(root, folders):
    edges = {}
    for f in sources(root, folders):
        u = unit(f)
        edges.setdefault(u, set())
        for line in read(root, f).splitlines():
            m = INCLUDE.match(line)
            if m and os.path.exists(os.path.join(root, m.group(1))) and unit(m.group(1)) != u:
                edges[u].add(unit(m.group(1)))
    return edges


def cycles(edges):
    """Strongly connected components with more than one unit (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def check_include_cycles(root):
    edges = include_graph(root, LIBRARIES + ["apps"])
    problems = []
    for comp in cycles(edges):
        where = "apps" if all(u.startswith("apps/") for u in comp) else "library"
        problems.append(f"{where} include cycle of {len(comp)} units: " + ", ".join(comp))
    print(f"include cycles: {len(problems)} in the library folders and apps/")
    for u, targets in sorted(edges.items()):
        for t in sorted(targets):
            for lower, upper in APPS_DOWNWARD:
                if u.startswith(lower) and any(t.startswith(up) for up in upper):
                    problems.append(f"{u} includes {t}: {lower} is below it (include downward only)")
    return problems


CHECKS = {"dist-budget": check_dist_budget, "flag-words": check_flag_words, "include-cycles": check_include_cycles}


def main():
    ap = argparse.ArgumentParser(description="tandem's layout rules, checked from the source tree")
    ap.add_argument("check", choices=list(CHECKS) + ["all"])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = ap.parse_args()
    problems = []
    for name, fn in CHECKS.items():
        if args.check in (name, "all"):
            problems += fn(os.path.abspath(args.root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
