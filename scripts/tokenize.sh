#!/usr/bin/env bash
# tokenize.sh - runs scripts/tokenize_data.py (text files -> llm.c token
# shards with a Hugging Face tokenizer.json) in a virtual environment that
# has the `tokenizers` package from PyPI: ~/.cache/stepgraph/venv-bench
# (STEPGRAPH_TOKENIZE_VENV picks another), created on the first run. The
# arguments are tokenize_data.py's (--help lists them), e.g.
#   scripts/tokenize.sh --tokenizer DIR/tokenizer.json --out shards/ book.txt
# With --instruct first, scripts/prepare_instruct.py's instead: instruction or
# chat records (JSON/JSONL) to shards with a loss mask, e.g.
#   scripts/tokenize.sh --instruct --tokenizer MODEL_DIR --max-length 512 --out sft/ alpaca.json
# Environment: STEPGRAPH_TOKENIZE_VENV (the virtual environment), XDG_CACHE_HOME.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV=${STEPGRAPH_TOKENIZE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
# --help: this, then tokenize_data.py's (argparse needs no tokenizers: no set-up)
for a in "$@"; do
	case $a in -h | --help)
		sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
		echo
		py=python3
		[ -x "$VENV/bin/python" ] && py=$VENV/bin/python
		if [ "${1:-}" = --instruct ]; then
			exec "$py" "$REPO_ROOT/scripts/prepare_instruct.py" --help
		fi
		exec "$py" "$REPO_ROOT/scripts/tokenize_data.py" --help ;;
	esac
done
if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tokenizers' 2>/dev/null; then
	echo "tokenize: setting up $VENV (tokenizers from PyPI)" >&2
	[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" ||
		{ echo "tokenize: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 2; }
	"$VENV/bin/pip" install -q tokenizers ||
		{ echo "tokenize: cannot install tokenizers from PyPI" >&2; exit 2; }
fi
if [ "${1:-}" = --instruct ]; then
	shift
	# chat templates are Jinja: jinja2 too (best effort; --template model says when missing)
	"$VENV/bin/python" -c 'import jinja2' 2>/dev/null || "$VENV/bin/pip" install -q jinja2 ||
		echo "tokenize: could not install jinja2: --template model will not work" >&2
	exec "$VENV/bin/python" "$REPO_ROOT/scripts/prepare_instruct.py" "$@"
fi
exec "$VENV/bin/python" "$REPO_ROOT/scripts/tokenize_data.py" "$@"
