"""docs_links.py - the relative links of Markdown pages, checked against the tree.

    python3 docs_links.py ROOT FILE.md...

For every inline link or image `[text](target)` of each FILE (relative to
ROOT) whose target is not a URL: the file or folder it names must exist,
relative to the page, and a `#anchor` (on another page or on the page itself)
must be the anchor GitHub gives one of that page's headings. Links inside
fenced code blocks and inline code are not links. Prints one line per broken
link, `FILE:LINE: TARGET: why`, and exits 1 when there is one, else 0.
`--missing-ok PATH` (repeatable, relative to ROOT) reports a link to PATH
that does not exist as `FILE:LINE: TARGET: pending` without failing: a page
another branch adds.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """(line number, line) outside fenced code, with inline code blanked."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation other
    than '-' and '_' dropped, each space a '-'."""
    s = heading.strip().lower()
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link's text only
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, cache={}):
    """The anchors of a page's headings (outside fenced code); a repeated
    heading's anchor takes -1, -2 ... as on GitHub."""
    if path not in cache:
        seen = {}
        found = set()
        fenced = False
        for line in open(path, encoding="utf-8").read().split("\n"):
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            a = slug(m.group(1))
            k = seen.get(a, 0)
            seen[a] = k + 1
            found.add(a if k == 0 else "%s-%d" % (a, k))
        cache[path] = found
    return cache[path]


def main(argv):
    root = argv[1]
    missing_ok = set()
    files = []
    args = iter(argv[2:])
    for a in args:
        if a == "--missing-ok":
            missing_ok.add(os.path.normpath(next(args)))
        else:
            files.append(a)
    bad = 0
    for f in files:
        path = os.path.join(root, f)
        text = open(path, encoding="utf-8").read()
        for n, line in prose_lines(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto: ...
                file_part, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                    if file_part else path
                rel = os.path.relpath(dest, root)
                if not os.path.exists(dest):
                    if rel in missing_ok:
                        print("%s:%d: %s: pending" % (f, n, target))
                        continue
                    print("%s:%d: %s: no such file" % (f, n, target))
                    bad += 1
                    continue
                if frag and dest.endswith(".md") and frag not in anchors(dest):
                    print("%s:%d: %s: no heading of %s has that anchor" % (f, n, target, rel))
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
