#!/usr/bin/env python3
"""include_rule.py - checks the dependency rule of docs/architecture.md.

usage: include_rule.py SRCDIR [RULES]

RULES (default SRCDIR/tests/include_rule.txt) says which folder may include
which, which folders know nothing of StarPU, which cycles between modules are
tolerated and which Makefile.am library holds which folders. Every
#include "..." of the .c/.h/.cu/.cc files under the ruled folders is resolved
(from the tree's top, else from the including file's folder) and checked.
Prints one line per breach, "FILE:LINE: ..." naming the rule broken, and exits
1 if there is any, 0 otherwise. tests/ (tests may include anything) and
build outputs are not scanned.
"""
import os
import re
import sys

SRC_EXT = ('.c', '.h', '.cu', '.cc')
INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^">]+)[">]')


def read_rules(path):
    """(may, pure, cycle_ok, libs, order) from the rule file."""
    may, pure, cycle_ok, libs, order, known = {}, [], [], {}, [], set()
    for ln, raw in enumerate(open(path), 1):
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(':')
        key, words = key.strip(), rest.split()
        if key == 'pure':
            pure += words
        elif key == 'cycle-ok':
            cycle_ok.append(set(words))
        elif key == 'known':
            known.add((words[0], words[1]))
        elif key == 'library':
            libs[words[0]] = words[1:]
            order.append(words[0])
        elif ' ' in key or not key:
            sys.exit(f'{path}:{ln}: cannot read "{raw.rstrip()}"')
        else:
            may[key] = words
    for f, lows in may.items():
        for low in lows:
            if low != '*' and not low.endswith('.h') and low not in may:
                sys.exit(f'{path}: {f} may include {low}, which has no line of its own')
    return may, pure, cycle_ok, libs, order, known


def closure(may):
    """Folder -> (folders, single files) it may include, transitively."""
    out = {}

    def walk(f, seen):
        if f in out:
            return out[f]
        if f in seen:
            sys.exit(f'include rule: the rule itself has a cycle through {f}')
        folders, files = {f}, set()
        for low in may[f]:
            if low == '*':
                folders |= set(may)
            elif low.endswith('.h'):
                files.add(low)
            else:
                lf, lfiles = walk(low, seen | {f})
                folders |= lf
                files |= lfiles
        out[f] = (folders, files)
        return out[f]

    for f in may:
        walk(f, set())
    return out


def folder_of(path, may):
    best = None
    for f in may:
        if (path == f or path.startswith(f + '/')) and (best is None or len(f) > len(best)):
            best = f
    return best


def sources(src, may):
    tops = sorted({f.split('/')[0] for f in may})
    for top in tops:
        for dp, dns, fns in os.walk(os.path.join(src, top)):
            dns[:] = sorted(d for d in dns if not d.startswith('.'))
            for fn in sorted(fns):
                if fn.endswith(SRC_EXT):
                    full = os.path.join(dp, fn)
                    yield os.path.relpath(full, src).replace(os.sep, '/')


def resolve(src, rel, inc):
    """The tree path an include names, or None (a system header)."""
    if os.path.isfile(os.path.join(src, inc)):
        return os.path.normpath(inc).replace(os.sep, '/')
    local = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, '/')
    if os.path.isfile(os.path.join(src, local)):
        return local
    return None


def check_includes(src, may, pure, allowed, known, problems):
    """Folder breaches and StarPU in pure folders; returns module edges.
    A breach listed as known is printed as such, not counted; a known line
    that matches nothing is a problem (the line is to go)."""
    edges, seen = {}, set()
    for rel in sources(src, may):
        f = folder_of(rel, may)
        if f is None:
            problems.append(f'{rel}:1: in no folder of the include rule: give its folder a line')
            continue
        folders, files = allowed[f]
        mod = os.path.splitext(rel)[0]
        with open(os.path.join(src, rel), errors='replace') as fp:
            for ln, text in enumerate(fp, 1):
                m = INCLUDE.match(text)
                if not m:
                    continue
                quote, inc = m.groups()
                if quote == '<':
                    if f in pure and inc.startswith('starpu'):
                        problems.append(f'{rel}:{ln}: includes <{inc}>, but {f}/ knows nothing '
                                        f'of StarPU (rule "pure")')
                    continue
                tgt = resolve(src, rel, inc)
                if tgt is None:
                    if '/' in inc:
                        problems.append(f'{rel}:{ln}: includes "{inc}", which is not in the tree')
                    continue
                tmod = os.path.splitext(tgt)[0]
                if tmod != mod:
                    edges.setdefault(mod, {}).setdefault(tmod, f'{rel}:{ln}')
                g = folder_of(tgt, may)
                if '/' not in tgt or g == f or g in folders or tgt in files:
                    continue
                if g is None:
                    problems.append(f'{rel}:{ln}: includes "{inc}", in no folder of the rule')
                    continue
                lows = ' '.join(sorted(may[f])) or 'nothing'
                msg = (f'{rel}:{ln}: {f} includes {tgt} ({g}): {f} may include only '
                       f'{lows} and what they may (tests/include_rule.txt)')
                if (rel, tgt) in known:
                    seen.add((rel, tgt))
                    print(f'known: {msg}')
                else:
                    problems.append(msg)
    for rel, tgt in sorted(known - seen):
        problems.append(f'{rel}:1: "known: {rel} {tgt}" matches no include any more: '
                        f'remove that line of tests/include_rule.txt')
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = len(index)
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_cycles(edges, cycle_ok, problems):
    for comp in cycles(edges):
        if any(set(comp) <= ok for ok in cycle_ok):
            continue
        where = [edges[a][b] for a in comp for b in comp if b in edges.get(a, {})]
        problems.append(f'{where[0]}: modules include each other ({" <-> ".join(comp)}; '
                        f'includes {", ".join(where)}): no cycle (rule "no cycle")')


def read_makefile(path):
    """Variables of a Makefile.am: name -> (first line, words), with '+='
    appended and both branches of a conditional taken."""
    vars_, ln, buf, start = {}, 0, '', 0
    for raw in open(path):
        ln += 1
        if not buf:
            start = ln
        line = raw.rstrip('\n')
        if line.endswith('\\'):
            buf += line[:-1] + ' '
            continue
        line, buf = buf + line, ''
        m = re.match(r'([A-Za-z_][A-Za-z0-9_]*)\s*(\+?=)\s*(.*)$', line)
        if not m or line.startswith('\t'):
            continue
        name, op, value = m.groups()
        first, words = vars_.get(name, (start, []))
        vars_[name] = (first, (words if op == '+=' else []) + value.split())
    return vars_


def expand(vars_, words, depth=0):
    out = []
    for w in words:
        m = re.fullmatch(r'\$\(([A-Za-z_][A-Za-z0-9_]*)\)', w)
        if m and depth < 20:
            out += expand(vars_, vars_.get(m.group(1), (0, []))[1], depth + 1)
        else:
            out.append(w)
    return out


def check_libraries(src, may, allowed, libs, problems):
    """Each library holds its folders' sources only; link lines name the
    libraries upper layer first, each once."""
    mk = os.path.join(src, 'Makefile.am')
    if not libs or not os.path.isfile(mk):
        return
    vars_ = read_makefile(mk)

    def var(lib):
        return lib.replace('.', '_').replace('-', '_')

    line, listed = vars_.get('noinst_LIBRARIES', (1, []))
    for lib in listed:
        if lib not in libs:
            problems.append(f'Makefile.am:{line}: {lib} has no "library:" line in the rule')
    for lib, folders in libs.items():
        line, words = vars_.get(var(lib) + '_SOURCES', (1, []))
        for w in expand(vars_, words):
            if w.endswith(('.c', '.cc', '.cu')) and folder_of(w, may) not in folders:
                problems.append(f'Makefile.am:{line}: {lib} holds {w}, which is not of '
                                f'{" ".join(folders)} (rule "library")')

    def upper(a, b):
        """True when library a may include library b (a is above b)."""
        return any(g in allowed[f][0] and f != g for f in libs[a] for g in libs[b])

    for name in sorted(vars_):
        if not name.endswith('_LDADD'):
            continue
        line, words = vars_[name]
        seq = [w for w in expand(vars_, words) if w in libs]
        for i, a in enumerate(seq):
            if a in seq[:i]:
                problems.append(f'Makefile.am:{line}: {name} links {a} twice')
            for b in seq[i + 1:]:
                if upper(b, a):
                    problems.append(f'Makefile.am:{line}: {name} links {a} before {b}, '
                                    f'which may include it (upper layer first)')


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    rules = sys.argv[2] if len(sys.argv) == 3 else os.path.join(src, 'tests', 'include_rule.txt')
    may, pure, cycle_ok, libs, order, known = read_rules(rules)
    problems = []
    edges = check_includes(src, may, pure, closure(may), known, problems)
    check_cycles(edges, cycle_ok, problems)
    check_libraries(src, may, closure(may), libs, problems)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
