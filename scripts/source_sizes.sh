#!/bin/sh
# source_sizes.sh - files and functions too long for a newcomer to read.
#
#   scripts/source_sizes.sh [--max-lines N] [--max-function N] [--list|--files] [FILE...]
#
# Without FILE, scans every .c, .cu and .h of the source tree (this script's
# ../) outside tests/, the CUDA emulator (codelets/cuda/emu/), the tests'
# programs (bench/, tools/), hidden folders, build folders and generated
# files (sg_autoconf.h, *_js.c).
# Prints one line per file over --max-lines (default 900) lines,
#   FILE: N lines (over 900)
# and one per function over --max-function (default 150) lines, counted from
# the first line of its declarator to its closing brace,
#   FILE:LINE NAME: N lines (over 150)
# and exits 1 if there is any, else 0 (2: bad arguments). --list prints
# every function instead, "LINES FILE:LINE NAME", and exits 0; --files the
# files it would scan, one a line.
#
# The scanner is a brace-depth count over the text with comments, string
# and character literals and preprocessor lines blanked; a brace that opens
# at depth 0 right after a ')' opens a function (struct bodies and
# initialisers do not end in ')').
set -u
max_lines=900
max_function=150
list=0
while [ $# -gt 0 ]; do
	case "$1" in
	--max-lines) max_lines=${2:-}; shift 2 || exit 2 ;;
	--max-function) max_function=${2:-}; shift 2 || exit 2 ;;
	--list) list=1; shift ;;
	--files) list=2; shift ;;
	-h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--) shift; break ;;
	-*) echo "source_sizes.sh: unknown option '$1'" >&2; exit 2 ;;
	*) break ;;
	esac
done
for v in "$max_lines" "$max_function"; do
	case "$v" in '' | *[!0-9]*)
		echo "source_sizes.sh: --max-lines and --max-function take a line count (got '$v')" >&2
		exit 2
		;;
	esac
done

root=""
if [ $# -eq 0 ]; then
	root=$(cd "$(dirname "$0")/.." && pwd)
	files=$(find "$root" \( -path "$root/tests" -o -path "$root/codelets/cuda/emu" \
		-o -path "$root/bench" -o -path "$root/tools" -o -name '.?*' -o -name '_build' \
		-o -name 'build-*' -o -name 'stepgraph-*' -o -name 'sg_autoconf.h' -o -name '*_js.c' \) -prune \
		-o -type f \( -name '*.c' -o -name '*.cu' -o -name '*.h' \) -print | LC_ALL=C sort)
	[ -n "$files" ] || { echo "source_sizes.sh: no source files under $root" >&2; exit 2; }
	# shellcheck disable=SC2086 # one path per word: the tree has no spaces in names
	set -- $files
fi
if [ "$list" = 2 ]; then
	printf '%s\n' "$@" | sed "s|^${root:+$root/}||"
	exit 0
fi

LC_ALL=C awk -v sq="'" -v root="${root:+$root/}" -v max_lines="$max_lines" -v max_function="$max_function" -v list="$list" '
function report(msg) { print msg; bad = 1 }
function end_file(   n) {
	if (FNR_last > max_lines + 0 && !list)
		report(file ": " FNR_last " lines (over " max_lines ")")
}
# the identifier before the parenthesis that matches the last ")" of s
function func_name(s,   i, d, c, j) {
	d = 0
	for (i = length(s); i > 0; i--) {
		c = substr(s, i, 1)
		if (c == ")") d++
		else if (c == "(") { d--; if (d == 0) break }
	}
	s = substr(s, 1, i - 1)
	sub(/[ \t]+$/, "", s)
	sub(/<[^<>]*>$/, "", s)
	if (match(s, /[A-Za-z_][A-Za-z_0-9]*$/)) return substr(s, RSTART)
	return "?"
}
FNR == 1 {
	if (file != "") end_file()
	file = FILENAME
	if (root != "" && index(file, root) == 1) file = substr(file, length(root) + 1)
	depth = 0; incomment = 0; inpp = 0; head = ""; headline = 0
}
{
	FNR_last = FNR
	line = $0
	# preprocessor lines (and their continuations) hold no code braces
	if (inpp) { inpp = (line ~ /\\$/); next }
	if (!incomment && line ~ /^[ \t]*#/) { inpp = (line ~ /\\$/); next }
	out = ""
	n = length(line)
	for (i = 1; i <= n; i++) {
		c = substr(line, i, 1)
		if (incomment) {
			if (c == "*" && substr(line, i + 1, 1) == "/") { incomment = 0; i++ }
			continue
		}
		if (c == "/" && substr(line, i + 1, 1) == "*") { incomment = 1; i++; continue }
		if (c == "/" && substr(line, i + 1, 1) == "/") break
		if (c == "\"" || c == sq) {
			q = c
			for (i++; i <= n; i++) {
				d = substr(line, i, 1)
				if (d == "\\") { i++; continue }
				if (d == q) break
			}
			out = out "_"
			continue
		}
		out = out c
	}
	# walk the code characters, tracking depth and the text since the last
	# top-level statement: a function header ends in ")" when its "{" opens
	m = length(out)
	for (i = 1; i <= m; i++) {
		c = substr(out, i, 1)
		if (depth == 0) {
			if (c == "{") {
				h = head; sub(/[ \t]+$/, "", h)
				isfn = (substr(h, length(h), 1) == ")")
				fname = isfn ? func_name(h) : ""
				fstart = headline
				depth = 1
				head = ""; headline = 0
				continue
			}
			if (c == ";" || c == "}") { head = ""; headline = 0; continue }
			if (c !~ /[ \t]/ && headline == 0) headline = FNR
			head = head c
			continue
		}
		if (c == "{") depth++
		else if (c == "}") {
			depth--
			if (depth == 0 && isfn) {
				len = FNR - fstart + 1
				if (list) print len " " file ":" fstart " " fname
				else if (len > max_function + 0)
					report(file ":" fstart " " fname ": " len " lines (over " max_function ")")
				isfn = 0
			}
		}
	}
	if (depth == 0) head = head " "
}
END {
	if (file != "") end_file()
	exit bad
}' "$@"
