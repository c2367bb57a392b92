# gpu_carry_env.sh - sourced by the scripts that run on a lent GPU machine
# (gpu_verify.sh, bench_gpu_suite.sh): the carry of gpu_prepare.sh made usable.
#
#   gpu_carry_env CARRY REPO_ROOT
#       unpacks CARRY/stepgraph-gpu.tar.xz into ${GV_UNPACK:-$TMPDIR/stepgraph-gpu-carry}
#       (once per archive) and sources its env.sh; without an archive (or when it
#       cannot be unpacked) the build in REPO_ROOT is used. Sets CARRY to the
#       unpacked directory and CARRY_NOTE to why the carry was not used ("" when it
#       was); exports SG_SRCDIR, SG_BUILDDIR, STEPGRAPH_MODELS_DIR and
#       STEPGRAPH_MACHINES_DIR as env.sh or the build has them.
#   gpu_carry_wheels SITE
#       pip-installs the carried wheels (DeepSpeed and what it imports that the
#       image lacks: gpu_prepare.sh) into SITE, puts SITE on PYTHONPATH and SITE/bin
#       (ninja, which torch's extension builder runs for DeepSpeed's CPU Adam) on
#       PATH, and prints the compiler, ninja and Python.h it found. Returns 1 when
#       there are no wheels or pip failed.

gpu_carry_env() {
	local carry=$1 root=$2 shown=$1 archive unpack
	case "$carry" in /*) ;; *) carry=$root/$carry ;; esac
	archive=$carry/stepgraph-gpu.tar.xz
	CARRY_NOTE=""
	if [ -f "$archive" ]; then
		unpack=${GV_UNPACK:-${TMPDIR:-/tmp}/stepgraph-gpu-carry}
		if [ ! -f "$unpack/.unpacked" ] || [ "$archive" -nt "$unpack/.unpacked" ]; then
			rm -rf "$unpack"
			mkdir -p "$unpack"
			if command -v xz >/dev/null 2>&1; then
				tar -C "$unpack" -xJf "$archive"
			else
				python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$unpack"
			fi && touch "$unpack/.unpacked" || CARRY_NOTE="could not unpack $archive into $unpack"
		fi
		carry=$unpack
	fi
	CARRY=$carry
	if [ -z "$CARRY_NOTE" ] && [ -f "$carry/env.sh" ]; then
		export SG_SRCDIR=$root
		# shellcheck disable=SC1091
		. "$carry/env.sh"
	else
		unset SG_CARRY
		export SG_BUILDDIR=${SG_BUILDDIR:-$root} SG_SRCDIR=$root
		export STEPGRAPH_MODELS_DIR=${STEPGRAPH_MODELS_DIR:-$root/models}
		export STEPGRAPH_MACHINES_DIR=${STEPGRAPH_MACHINES_DIR:-$root/configs/machines}
		[ -n "$CARRY_NOTE" ] || CARRY_NOTE="no $shown (scripts/gpu_prepare.sh): the build in $SG_BUILDDIR"
	fi
}

gpu_carry_wheels() {
	local site=$1
	if [ -d "${SG_CARRY:-}/wheels" ] && python3 -m pip install -q --no-index --no-deps \
		--no-compile --no-cache-dir --upgrade --target "$site" "$SG_CARRY"/wheels/*.whl; then
		export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
		export PATH="$site/bin:$PATH"
		echo "DeepSpeed from the carried wheels: $(ls "$SG_CARRY/wheels" | tr '\n' ' ')"
		echo "c++: $(c++ --version 2>&1 | head -n1); ninja: $(ninja --version 2>&1 | head -n1);" \
			"Python.h: $(python3 -c 'import sysconfig, os; p = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print(p if os.path.exists(p) else "missing")' 2>&1)"
		return 0
	fi
	echo "no DeepSpeed wheels installed (gpu_prepare.sh --no-deepspeed, or pip failed): its rows will fail"
	return 1
}
