#!/usr/bin/env bash
# gpu_prepare.sh - on this (CPU) machine, build everything a lent GPU machine needs to run
# stepgraph with CUDA workers, into one ignored folder that travels with the device tool's
# `carry` (docs/gpu.md, "Benchmarks and checks for a GPU machine"): the GPU machine has
# CUDA, PyTorch and a compiler, but no StarPU, no autotools, no Debian packages and no
# network, so nothing is built there.
#
#   scripts/gpu_prepare.sh              # builds (incrementally) and fills .gpu-carry/
#   scripts/gpu_prepare.sh --help
#
# Then on the GPU machine: scripts/gpu_verify.sh (which sources .gpu-carry/env.sh).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

die() { say "ERROR: $1"; exit "${2:-1}"; }

usage() {
	cat <<'EOF'
usage: scripts/gpu_prepare.sh [options]

Builds stepgraph with CUDA on this machine (which needs nvcc: scripts/setup.sh's CUDA
detection) from the working tree - tracked files and untracked files git does not
ignore - in a build directory outside the repository, stages the result there
(BUILD-DIR/carry/) and packs it as CARRY/stepgraph-gpu.tar.xz (CARRY: default .gpu-carry/
in the repository root, ignored by git; MANIFEST.txt beside it). The archive holds:
  build/stepgraph, build/stepgraph-sim   the CUDA build, configured --without-mpi
                                         (stepgraph-sim: the SimGrid simulator, a
                                         wrapper that picks lib-sim/)
  build/tests/test_cuda_ops, test_cuda_attention, test_cuda_block, cuda_ops_dump, bench_attention
                                         the real-GPU test programs
  mpi/stepgraph                          the same build with Open MPI (for
                                         `mpirun -np 1`)
  ompi/                                  this machine's Open MPI (mpirun, its libraries
                                         and MCA components), relocated there with
                                         OPAL_PREFIX where the GPU machine has none
  lib/, lib-sim/                         StarPU (native, SimGrid) and every shared
                                         library the programs need beyond glibc,
                                         libstdc++ and CUDA's own (cudart, cuBLAS,
                                         NCCL...: the GPU machine's PyTorch has them)
  wheels/                                DeepSpeed (DS_VERSION, default 0.19.8: a wheel
                                         built here from PyPI's sdist, its ops JIT-built
                                         there) and what it needs that the GPU machines'
                                         image lacks (hjson, pydantic and its own,
                                         einops, msgpack, ninja, py-cpuinfo, psutil), for
                                         Python 3.12 x86-64: bench_gpu.sh's deepspeed and
                                         superoffload modes (pip from the bench venv, else
                                         python3 -m pip; needs the network)
  data/version8.txt                      the default training text (vim-runtime's),
                                         named by STEPGRAPH_DEFAULT_TEXT there
  env.sh                                 source it there (from the repository root,
                                         after unpacking): LD_LIBRARY_PATH (CUDA's
                                         libraries searched for there), PATH,
                                         STEPGRAPH_*_DIR, SG_BUILDDIR
  MANIFEST.txt                           commit, flags, sizes, libraries
Binaries are stripped; the size of CARRY and of the whole upload (working tree + CARRY)
are printed and checked against the device tool's 64 MiB. scripts/gpu_verify.sh unpacks
the archive on the GPU machine (into /tmp) and sources env.sh.

Options:
  --carry DIR       where the result goes (default .gpu-carry; relative to the repo root).
                    The device tool sends the checkout the session started in: from a
                    helper's worktree, name that checkout's folder (e.g.
                    /work/main/.gpu-carry); it must be ignored by git there
  --build-dir DIR   build directory (default $STEPGRAPH_CACHE/gpu-build-HASH, HASH of the
                    repository path; STEPGRAPH_CACHE defaults to ~/.cache/stepgraph)
  --jobs N          make -jN (default 2)
  --gencode FLAGS   nvcc -gencode flags (default: sm_90 only, the H100 and H200)
  --no-sim          leave out stepgraph-sim and lib-sim/ (simulate there impossible)
  --no-mpi          leave out mpi/ (also left out when this machine has no Open MPI)
  --no-ompi         leave out ompi/ (this machine's Open MPI, for a GPU machine without one)
  --no-deepspeed    leave out wheels/ (DeepSpeed for the GPU benchmark's DeepSpeed rows)
  --limit-mib N     the upload limit to check against (default 64)
  -h, --help        this help

Environment: the build reads .deps-build/env.sh (scripts/setup.sh) from the repository
root when it is there, else `scripts/setup.sh --print-env`.
Exit status: 0 done and within the limit; 1 a build or a step failed, or over the
limit; 2 usage error, or no CUDA here.
EOF
}

CARRY=.gpu-carry BUILD_DIR="" JOBS=2 GENCODE="-gencode arch=compute_90,code=sm_90"
WANT_SIM=1 WANT_MPI=1 WANT_OMPI=1 WANT_DS=1 LIMIT_MIB=64
DS_VERSION=${DS_VERSION:-0.19.8}
need() {
	if [ "$#" -lt 2 ] || [ -z "$2" ]; then
		usage >&2
		die "option $1 needs a value" 2
	fi
}
while [ "$#" -gt 0 ]; do
	case "$1" in
	--carry) need "$@"; CARRY=$2; shift 2 ;;
	--build-dir) need "$@"; BUILD_DIR=$2; shift 2 ;;
	--jobs) need "$@"; JOBS=$2; shift 2 ;;
	--gencode) need "$@"; GENCODE=$2; shift 2 ;;
	--no-sim) WANT_SIM=0; shift ;;
	--no-mpi) WANT_MPI=0; shift ;;
	--no-ompi) WANT_OMPI=0; shift ;;
	--no-deepspeed) WANT_DS=0; shift ;;
	--limit-mib) need "$@"; LIMIT_MIB=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown option: $1" 2 ;;
	esac
done
case "$JOBS" in '' | *[!0-9]* | 0) die "--jobs $JOBS: a positive integer" 2 ;; esac
case "$LIMIT_MIB" in '' | *[!0-9]* | 0) die "--limit-mib $LIMIT_MIB: a positive integer" 2 ;; esac

cd "$REPO_ROOT"
case "$CARRY" in /*) ;; *) CARRY=$REPO_ROOT/$CARRY ;; esac
# The checkout that travels: the one CARRY is in (the device tool sends the checkout the
# session started in; a helper's worktree builds here and names that checkout's folder)
carry_parent=$(dirname "$CARRY")
mkdir -p "$carry_parent" 2>/dev/null || true
SEND_ROOT=$(git -C "$carry_parent" rev-parse --show-toplevel 2>/dev/null) ||
	die "--carry $CARRY is not inside a git checkout (the device tool carries folders of the checkout it sends)" 2
case "$CARRY" in "$SEND_ROOT"/?*) ;; *) die "--carry must be a folder inside a checkout, not $CARRY" 2 ;; esac
CARRY_REL=${CARRY#"$SEND_ROOT"/}
git -C "$SEND_ROOT" check-ignore -q "$CARRY_REL/env.sh" ||
	die "$CARRY_REL is not ignored by git in $SEND_ROOT: it would travel as part of the tree (add it to .gitignore)" 2
[ "$SEND_ROOT" = "$REPO_ROOT" ] || say "building $REPO_ROOT's working tree; the carry goes into $SEND_ROOT, whose tree travels with it"

# ---- environment: StarPU prefixes and configure flags (scripts/setup.sh) ---------------
if [ -f "$REPO_ROOT/.deps-build/env.sh" ]; then
	# shellcheck disable=SC1091
	. "$REPO_ROOT/.deps-build/env.sh"
else
	eval "$("$REPO_ROOT/scripts/setup.sh" --print-env)"
fi
[ -f "${STARPU_NATIVE_PREFIX:-}/lib/pkgconfig/starpu-1.4.pc" ] ||
	die "native StarPU not found at ${STARPU_NATIVE_PREFIX:-?}: run scripts/setup.sh first" 2
grep -q 'define STARPU_USE_CUDA 1' "$STARPU_NATIVE_PREFIX"/include/starpu/1.4/starpu_config.h ||
	die "the native StarPU at $STARPU_NATIVE_PREFIX has no CUDA: scripts/setup.sh builds it with CUDA when it finds nvcc" 2
case " ${STEPGRAPH_CONFIGURE_FLAGS:-} " in
*" --with-cuda="*) ;;
*) die "STEPGRAPH_CONFIGURE_FLAGS has no --with-cuda (no nvcc found by scripts/setup.sh): cannot build for a GPU" 2 ;;
esac
if [ "$WANT_SIM" = 1 ] && [ -z "${STARPU_SIMGRID_PREFIX:-}" ]; then
	say "no SimGrid StarPU (scripts/setup.sh --no-simgrid?): leaving out stepgraph-sim"
	WANT_SIM=0
fi
for t in autoreconf make gcc strip objdump ldd git cmp tar xz; do
	command -v "$t" >/dev/null 2>&1 || die "$t not found" 2
done

CACHE_ROOT="${STEPGRAPH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph}"
if [ -z "$BUILD_DIR" ]; then
	BUILD_DIR="$CACHE_ROOT/gpu-build-$(printf '%s' "$REPO_ROOT" | sha256sum | cut -c1-10)"
fi
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
say "build directory: $BUILD_DIR"

# first: the first line of its input, reading all of it (under pipefail, a reader that stops
# early can make the writer die of SIGPIPE and the pipeline fail)
first() { awk 'NR == 1 { print }'; }

# ---- source sync: only files whose content changed get copied (and a new mtime) ---------
# sync_tree DEST: the working tree's files (tracked, and untracked not ignored) into DEST
sync_tree() {
	local dest=$1 f n=0
	mkdir -p "$dest"
	while IFS= read -r -d '' f; do
		[ -f "$f" ] || continue # deleted in the working tree
		if ! cmp -s "$f" "$dest/$f"; then
			mkdir -p "$dest/$(dirname "$f")"
			cp "$f" "$dest/$f"
			n=$((n + 1))
		fi
	done < <(git ls-files -co --exclude-standard -z)
	say "$(basename "$dest"): $n file(s) updated from the working tree"
}

# configure_tree DIR FLAGS...: autoreconf and configure when not done or flags changed
configure_tree() {
	local dir=$1 want
	shift
	want=$(printf '%s\n' "$@" "NVCC_GENCODE=$GENCODE")
	if [ ! -x "$dir/configure" ] || [ "$dir/configure.ac" -nt "$dir/configure" ]; then
		say "$(basename "$dir"): autoreconf -fi"
		(cd "$dir" && autoreconf -fi >"$dir/.sg-autoreconf.log" 2>&1) ||
			{ tail -20 "$dir/.sg-autoreconf.log" >&2; die "autoreconf failed in $dir"; }
		rm -f "$dir/.sg-configure-flags"
	fi
	if [ ! -f "$dir/Makefile" ] || [ "$(cat "$dir/.sg-configure-flags" 2>/dev/null)" != "$want" ]; then
		say "$(basename "$dir"): ./configure $*"
		(cd "$dir" && ./configure "$@" NVCC_GENCODE="$GENCODE" >"$dir/.sg-configure.log" 2>&1) ||
			{ tail -30 "$dir/.sg-configure.log" >&2; die "configure failed in $dir (log: $dir/.sg-configure.log)"; }
		printf '%s\n' "$want" >"$dir/.sg-configure-flags"
	fi
}

# make_in DIR TARGETS...
make_in() {
	local dir=$1
	shift
	say "$(basename "$dir"): make -j$JOBS $*"
	(cd "$dir" && make -j"$JOBS" "$@" >"$dir/.sg-make.log" 2>&1) ||
		{ tail -40 "$dir/.sg-make.log" >&2; die "make failed in $dir (log: $dir/.sg-make.log)"; }
}

# shellcheck disable=SC2206
FLAGS=(${STEPGRAPH_CONFIGURE_FLAGS})
if [ "$WANT_SIM" = 0 ]; then
	# drop --with-starpu-simgrid=...: a smaller build
	kept=()
	for f in "${FLAGS[@]}"; do
		case "$f" in --with-starpu-simgrid=*) ;; *) kept+=("$f") ;; esac
	done
	FLAGS=("${kept[@]}")
fi
GPU_TESTS=(tests/test_cuda_ops tests/test_cuda_attention tests/test_cuda_block tools/cuda_ops_dump bench/bench_attention)

# 1. the main build: CUDA, no MPI (the GPU machine may have no libmpi)
MAIN=$BUILD_DIR/main
sync_tree "$MAIN"
configure_tree "$MAIN" "${FLAGS[@]}" --without-mpi
grep -q '^#define SG_HAVE_CUDA 1' "$MAIN/sg_autoconf.h" || die "configure in $MAIN found no CUDA (see $MAIN/.sg-configure.log)"
targets=(stepgraph "${GPU_TESTS[@]}")
[ "$WANT_SIM" = 1 ] && targets+=(stepgraph-sim)
make_in "$MAIN" "${targets[@]}"

# 2. the MPI build, when this machine has Open MPI
MPI_BUILT=0
if [ "$WANT_MPI" = 1 ]; then
	if pkg-config --exists ompi-c 2>/dev/null || command -v mpicc >/dev/null 2>&1; then
		MPIB=$BUILD_DIR/mpi
		[ -f "$MPIB/Makefile" ] || { rm -rf "$MPIB"; cp -a "$MAIN" "$MPIB"; rm -f "$MPIB/.sg-configure-flags"; }
		sync_tree "$MPIB"
		mflags=()
		for f in "${FLAGS[@]}"; do
			case "$f" in --with-starpu-simgrid=*) ;; *) mflags+=("$f") ;; esac
		done
		configure_tree "$MPIB" "${mflags[@]}" --with-mpi
		grep -q '^#define SG_HAVE_MPI 1' "$MPIB/sg_autoconf.h" || die "configure --with-mpi in $MPIB found no MPI"
		make_in "$MPIB" stepgraph
		MPI_BUILT=1
	else
		say "no Open MPI here (pkg-config ompi-c, mpicc): no mpi/ build"
	fi
fi

# ---- the carry folder --------------------------------------------------------------------
STAGE=$BUILD_DIR/carry
rm -rf "$STAGE.tmp"
mkdir -p "$STAGE.tmp/build/tests" "$STAGE.tmp/build/bench" "$STAGE.tmp/build/tools" "$STAGE.tmp/lib"
put_bin() { # put_bin SRC DEST: copy and strip
	cp "$1" "$2"
	strip --strip-unneeded "$2" 2>/dev/null || strip "$2"
	chmod 755 "$2"
}
put_bin "$MAIN/stepgraph" "$STAGE.tmp/build/stepgraph"
for t in "${GPU_TESTS[@]}"; do
	put_bin "$MAIN/$t" "$STAGE.tmp/build/$t"
done
if [ "$MPI_BUILT" = 1 ]; then
	mkdir -p "$STAGE.tmp/mpi"
	put_bin "$MPIB/stepgraph" "$STAGE.tmp/mpi/stepgraph"
fi

# Shared libraries: what ldd resolves, except glibc's, the C++ runtime (the GPU machine's
# is as new or newer) and CUDA's (they must match the GPU machine's driver: taken there).
# MPI's libraries stay behind: mpi/stepgraph uses the GPU machine's Open MPI.
is_system_lib() {
	case "$1" in
	linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
		librt.so.* | libresolv.so.* | libutil.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
	esac
	return 1
}
is_cuda_lib() {
	case "$1" in
	libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libcusparse.so.* | \
		libcusolver.so.* | libnvJitLink.so.* | libnccl.so.* | libcurand.so.* | libcufft.so.* | \
		libnvrtc*.so.* | libnvidia-*.so.*) return 0 ;;
	esac
	return 1
}
is_mpi_lib() {
	case "$1" in
	libmpi.so.* | libmpi_*.so.* | libopen-pal.so.* | libopen-rte.so.* | libpmix.so.* | \
		libevent*.so.* | libucp.so.* | libucs.so.* | libuct.so.* | libucm.so.* | libfabric.so.* | \
		libpsm*.so.* | libibverbs.so.* | librdmacm.so.* | libmunge.so.*) return 0 ;;
	esac
	return 1
}
CUDA_SONAMES=""
# copy_deps DEST ELF...: the libraries the ELF files need, into DEST
copy_deps() {
	local dest=$1 name path missing
	shift
	missing=$(ldd "$@" 2>/dev/null | grep 'not found' | sort -u || true)
	[ -z "$missing" ] || die "libraries not found here for $*: $missing"
	while read -r name path; do
		[ -n "$name" ] || continue
		if is_cuda_lib "$name"; then
			case " $CUDA_SONAMES " in *" $name "*) ;; *) CUDA_SONAMES="$CUDA_SONAMES $name" ;; esac
			continue
		fi
		is_system_lib "$name" && continue
		is_mpi_lib "$name" && continue
		[ -f "$dest/$name" ] || cp -L "$path" "$dest/$name"
	done < <(ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
}
native_starpu=$(ldd "$MAIN/stepgraph" | awk '$1 ~ /^libstarpu-1\.4\.so/ { print $3 }')
[ -n "$native_starpu" ] || die "stepgraph does not link libstarpu-1.4: unexpected"
case "$native_starpu" in "$STARPU_NATIVE_PREFIX"/*) ;; *) die "stepgraph links $native_starpu, not the native StarPU of $STARPU_NATIVE_PREFIX" ;; esac
bins=("$STAGE.tmp"/build/stepgraph "$STAGE.tmp"/build/tests/* "$STAGE.tmp"/build/bench/* "$STAGE.tmp"/build/tools/*)
[ "$MPI_BUILT" = 1 ] && bins+=("$STAGE.tmp/mpi/stepgraph")
copy_deps "$STAGE.tmp/lib" "${bins[@]}"

if [ "$WANT_SIM" = 1 ]; then
	mkdir -p "$STAGE.tmp/lib-sim"
	put_bin "$MAIN/stepgraph-sim" "$STAGE.tmp/build/stepgraph-sim.bin"
	sim_starpu=$(ldd "$MAIN/stepgraph-sim" | awk '$1 ~ /^libstarpu-1\.4\.so/ { print $3 }')
	case "$sim_starpu" in "$STARPU_SIMGRID_PREFIX"/*) ;; *) die "stepgraph-sim links ${sim_starpu:-no StarPU}, not the SimGrid StarPU of $STARPU_SIMGRID_PREFIX" ;; esac
	# lib-sim/ holds the SimGrid libstarpu (same soname as the native one) and what only
	# the simulator needs; the wrapper puts it before lib/
	while read -r name path; do
		is_system_lib "$name" && continue
		is_cuda_lib "$name" && continue
		case "$name" in libstarpu-1.4.so.*) cp -L "$path" "$STAGE.tmp/lib-sim/$name"; continue ;; esac
		[ -f "$STAGE.tmp/lib/$name" ] || cp -L "$path" "$STAGE.tmp/lib-sim/$name"
	done < <(ldd "$MAIN/stepgraph-sim" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
	cat >"$STAGE.tmp/build/stepgraph-sim" <<'EOF'
#!/bin/sh
# stepgraph-sim with the SimGrid flavour of StarPU (lib-sim/ before lib/: both hold a
# libstarpu-1.4 of the same soname). Written by scripts/gpu_prepare.sh.
d=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$d/../lib-sim:$d/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/stepgraph-sim.bin" "$@"
EOF
	chmod 755 "$STAGE.tmp/build/stepgraph-sim"
fi
# Open MPI itself (this machine's, relocatable with OPAL_PREFIX), for a GPU machine without
# one: ompi/ mirrors the install under its prefix (bin/orterun, the MCA components in
# pkglibdir, the help files), ompi/lib/runtime/ holds the libraries mpi/stepgraph and the
# components need. gpu_verify.sh uses it only where the GPU machine has no mpirun.
OMPI_PACKED=""
if [ "$MPI_BUILT" = 1 ] && [ "$WANT_OMPI" = 1 ]; then
	if command -v ompi_info >/dev/null 2>&1 && command -v orterun >/dev/null 2>&1; then
		opath() { ompi_info --path all 2>/dev/null | sed -n "s/^ *$1: *//p" | first; }
		o_prefix=$(opath Prefix) o_pkglib=$(opath Pkglibdir) o_pkgdata=$(opath Pkgdatadir)
		case "$o_pkglib" in "$o_prefix"/*) ;; *) die "Open MPI's pkglibdir $o_pkglib is not under its prefix $o_prefix: cannot relocate it" ;; esac
		O=$STAGE.tmp/ompi
		mkdir -p "$O/bin" "$O/${o_pkglib#"$o_prefix"/}" "$O/lib/runtime" "$O/share"
		cp -L "$(command -v orterun)" "$O/bin/orterun"
		ln -s orterun "$O/bin/mpirun"
		command -v orted >/dev/null 2>&1 && cp -L "$(command -v orted)" "$O/bin/orted"
		[ -d "$o_pkgdata" ] && cp -rL "$o_pkgdata" "$O/share/"
		# the components that load without the network stacks a VM lacks (verbs, OFI, UCX,
		# PSM) or CUDA's driver API
		ncomp=0
		for c in "$o_pkglib"/*.so; do
			if ldd "$c" 2>/dev/null | grep -E 'not found|libibverbs|librdmacm|libfabric|libuc[pstm]\.|libpsm|libcuda\.so' >/dev/null; then
				continue
			fi
			cp -L "$c" "$O/${o_pkglib#"$o_prefix"/}/"
			ncomp=$((ncomp + 1))
		done
		# the libraries: MPI's own for mpi/stepgraph, orterun and the components
		while read -r name path; do
			is_system_lib "$name" && continue
			is_cuda_lib "$name" && continue
			[ -f "$STAGE.tmp/lib/$name" ] && continue
			[ -f "$O/lib/runtime/$name" ] || cp -L "$path" "$O/lib/runtime/$name"
		done < <(ldd "$MPIB/stepgraph" "$O/bin/orterun" "$O/${o_pkglib#"$o_prefix"/}"/*.so 2>/dev/null |
			awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
		# PMIx's own plugins and help files (its prefix relocated with PMIX_INSTALL_PREFIX)
		pmix_lib=$(ldd "$o_pkglib"/mca_pmix_*.so 2>/dev/null | awk '$1 ~ /^libpmix\.so/ && $3 ~ /^\// { print $3 }' | first)
		if [ -n "$pmix_lib" ]; then
			pmix_prefix=$(cd "$(dirname "$(readlink -f "$pmix_lib")")/.." && pwd)
			mkdir -p "$O/pmix/lib"
			[ -d "$pmix_prefix/lib/pmix" ] && cp -rL "$pmix_prefix/lib/pmix" "$O/pmix/lib/"
			[ -d "$pmix_prefix/share" ] && cp -rL "$pmix_prefix/share" "$O/pmix/"
		fi
		for f in "$O/lib/runtime"/* "$O/${o_pkglib#"$o_prefix"/}"/*.so "$O"/bin/orte* "$O"/pmix/lib/pmix/*.so; do
			strip --strip-unneeded "$f" 2>/dev/null || true
		done
		OMPI_PACKED="Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | first) from $o_prefix, $ncomp MCA components"
		say "ompi/: $OMPI_PACKED"
	else
		say "no ompi_info/orterun here: Open MPI not packed"
	fi
fi

# the C++ runtime of this machine, used there only when the GPU machine's is older than
# what the programs need (env.sh checks)
NEED_GLIBCXX=$(for f in "$STAGE.tmp"/build/stepgraph "$STAGE.tmp"/build/tests/* "$STAGE.tmp"/build/bench/* "$STAGE.tmp"/build/tools/* "$STAGE.tmp"/lib/* "$STAGE.tmp"/lib-sim/*; do
	objdump -T "$f" 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*'
done | sort -uV | tail -n1)
NEED_GLIBC=$(for f in "$STAGE.tmp"/build/* "$STAGE.tmp"/build/tests/* "$STAGE.tmp"/build/bench/* "$STAGE.tmp"/build/tools/* "$STAGE.tmp"/lib/* "$STAGE.tmp"/lib-sim/*; do
	objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'
done | sort -uV | tail -n1)
# DeepSpeed and what it needs beyond the GPU machines' image, as wheels (a peer of the
# GPU benchmark only, never a dependency of stepgraph)
DS_PACKED=absent
if [ "$WANT_DS" = 1 ]; then
	pip=""
	for p in "${STEPGRAPH_CACHE:-$HOME/.cache/stepgraph}/venv-bench/bin/pip" "python3 -m pip"; do
		if $p --version >/dev/null 2>&1; then pip=$p; break; fi
	done
	whl="$STAGE.tmp/wheels"
	mkdir -p "$whl"
	if [ -z "$pip" ]; then
		say "wheels/: no pip here (scripts/bench_venv.sh makes one): no DeepSpeed rows there"
	elif ! $pip wheel -q --no-deps -w "$whl" "deepspeed==$DS_VERSION" >"$BUILD_DIR/ds-wheel.log" 2>&1 ||
		! $pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
			--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
			--platform manylinux2014_x86_64 -d "$whl" hjson pydantic einops msgpack ninja py-cpuinfo psutil >>"$BUILD_DIR/ds-wheel.log" 2>&1; then
		say "wheels/: pip failed (no network?), see $BUILD_DIR/ds-wheel.log: no DeepSpeed rows there"
		rm -rf "$whl"
	else
		DS_PACKED="deepspeed $DS_VERSION with $(cd "$whl" && ls | grep -v '^deepspeed-' | sed 's/-[0-9].*//' | tr '\n' ' ')"
		say "wheels/: $DS_PACKED"
	fi
fi

# the default training text (vim-runtime's version8.txt, which the GPU machine lacks)
text=$(ls /usr/share/vim/vim*/doc/version8.txt 2>/dev/null | tail -n1)
[ -n "$text" ] || die "no /usr/share/vim/vim*/doc/version8.txt here (scripts/setup.sh installs vim-runtime)"
mkdir -p "$STAGE.tmp/data" && cp "$text" "$STAGE.tmp/data/version8.txt"
mkdir -p "$STAGE.tmp/lib-fallback"
for name in libstdc++.so.6 libgcc_s.so.1; do
	path=$(ldd "$MAIN/tests/test_cuda_ops" "$MAIN/stepgraph" | awk -v n="$name" '$1 == n && $3 ~ /^\// { print $3 }' | first)
	[ -n "$path" ] && cp -L "$path" "$STAGE.tmp/lib-fallback/$name"
done
# the libraries themselves: stripped of what the dynamic loader does not need
for f in "$STAGE.tmp"/lib/* "$STAGE.tmp"/lib-sim/* "$STAGE.tmp"/lib-fallback/*; do
	[ -f "$f" ] || continue
	chmod 644 "$f"
	strip --strip-unneeded "$f" 2>/dev/null || true
done

# ---- env.sh: sourced on the GPU machine ----------------------------------------------------
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
cat >"$STAGE.tmp/env.sh" <<EOF
# Written by scripts/gpu_prepare.sh on $(date -u '+%Y-%m-%d %H:%M UTC') from $commit.
# On the GPU machine, from the repository root, unpack $CARRY_REL/stepgraph-gpu.tar.xz into
# a folder D (scripts/gpu_verify.sh does it), then: . D/env.sh
# Sets SG_CARRY (D), SG_BUILDDIR, SG_SRCDIR, PATH, LD_LIBRARY_PATH (lib/ and the directories
# that hold CUDA's libraries there), STEPGRAPH_{MODELS,CONFIGS,MACHINES}_DIR,
# STEPGRAPH_SIM; SG_CUDA_MISSING lists the CUDA libraries not found (empty: all found).
SG_CUDA_SONAMES="${CUDA_SONAMES# }"
SG_NEED_GLIBCXX="$NEED_GLIBCXX" # the newest C++ runtime version the programs use
EOF
cat >>"$STAGE.tmp/env.sh" <<'EOF'
# where this file is: bash knows; another shell must set SG_CARRY first
if [ -z "${SG_CARRY:-}" ] && [ -n "${BASH_VERSION:-}" ]; then
	eval 'SG_CARRY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)'
fi
[ -n "${SG_CARRY:-}" ] || { echo "env.sh: source it from bash, or set SG_CARRY to its folder first" >&2; return 1; }
SG_SRCDIR=${SG_SRCDIR:-$(pwd)} # the repository root: models/, configs/, tests/
export SG_CARRY SG_SRCDIR SG_BUILDDIR="$SG_CARRY/build"
export STEPGRAPH_MODELS_DIR="$SG_SRCDIR/models" STEPGRAPH_CONFIGS_DIR="$SG_SRCDIR/configs" \
	STEPGRAPH_MACHINES_DIR="$SG_SRCDIR/configs/machines"
[ -x "$SG_CARRY/build/stepgraph-sim" ] && export STEPGRAPH_SIM="$SG_CARRY/build/stepgraph-sim"
# CUDA's libraries: the toolkit's folders, then the nvidia-* wheels of every Python there
sg_cuda_dirs() {
	local py sp
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
		[ -d "$d" ] && echo "$d"
	done
	for py in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
		command -v "$py" >/dev/null 2>&1 || continue
		"$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null
	done | sort -u | while read -r sp; do
		for d in "$sp"/nvidia/*/lib "$sp"/nvidia/cu*/lib; do
			[ -d "$d" ] && echo "$d"
		done
	done
}
SG_CUDA_LIBDIRS="" SG_CUDA_MISSING=""
sg_dirs=$(sg_cuda_dirs)
for so in $SG_CUDA_SONAMES; do
	case "$so" in libcuda.so.*) continue ;; esac # the driver's: the loader's own paths
	found=""
	for d in $sg_dirs; do
		if [ -e "$d/$so" ]; then found=$d; break; fi
	done
	if [ -z "$found" ]; then
		SG_CUDA_MISSING="$SG_CUDA_MISSING $so"
	else
		case ":$SG_CUDA_LIBDIRS:" in *":$found:"*) ;; *) SG_CUDA_LIBDIRS="$SG_CUDA_LIBDIRS${SG_CUDA_LIBDIRS:+:}$found" ;; esac
	fi
done
SG_CUDA_MISSING=${SG_CUDA_MISSING# }
export SG_CUDA_LIBDIRS SG_CUDA_MISSING
# lib-fallback/ (this machine's libstdc++) only when the system's lacks $SG_NEED_GLIBCXX
SG_FALLBACK=""
sg_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }')
if [ -n "$SG_NEED_GLIBCXX" ] && { [ -z "$sg_cxx" ] || ! grep -q "$SG_NEED_GLIBCXX" "$sg_cxx"; }; then
	SG_FALLBACK=$SG_CARRY/lib-fallback
fi
export SG_FALLBACK
case ":${LD_LIBRARY_PATH:-}:" in
*":$SG_CARRY/lib:"*) ;;
*) export LD_LIBRARY_PATH="$SG_CARRY/lib${SG_FALLBACK:+:$SG_FALLBACK}${SG_CUDA_LIBDIRS:+:$SG_CUDA_LIBDIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
esac
# the default training text, where the machine has no vim-runtime
if ! ls /usr/share/vim/vim*/doc/version8.txt >/dev/null 2>&1 && [ -z "${STEPGRAPH_DEFAULT_TEXT:-}" ]; then
	export STEPGRAPH_DEFAULT_TEXT="$SG_CARRY/data/version8.txt"
fi
case ":$PATH:" in *":$SG_CARRY/build:"*) ;; *) export PATH="$SG_CARRY/build:$PATH" ;; esac
# sg_use_ompi: the carried Open MPI (ompi/), for a machine without one
sg_use_ompi() {
	[ -x "$SG_CARRY/ompi/bin/mpirun" ] || return 1
	export OPAL_PREFIX="$SG_CARRY/ompi" PMIX_INSTALL_PREFIX="$SG_CARRY/ompi/pmix"
	export PATH="$SG_CARRY/ompi/bin:$PATH" LD_LIBRARY_PATH="$SG_CARRY/ompi/lib/runtime:$LD_LIBRARY_PATH"
}
unset so found d sg_cxx sg_dirs
EOF

# ---- manifest and sizes ------------------------------------------------------------------
{
	echo "stepgraph GPU carry, written by scripts/gpu_prepare.sh"
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "source: $commit"
	echo "built on: $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
	echo "needs there: $NEED_GLIBC or newer; $NEED_GLIBCXX (else lib-fallback/'s libstdc++ is used)"
	echo "nvcc: $("${STEPGRAPH_CONFIGURE_FLAGS##*--with-cuda=}/bin/nvcc" --version 2>/dev/null | tail -1 || echo '?')"
	echo "configure: ${FLAGS[*]} --without-mpi NVCC_GENCODE=$GENCODE"
	echo "mpi/: $([ "$MPI_BUILT" = 1 ] && echo "configure ... --with-mpi ($(pkg-config --modversion ompi-c 2>/dev/null || echo 'mpicc')); needs libmpi.so.40 there" || echo absent)"
	echo "ompi/: ${OMPI_PACKED:-absent}"
	echo "wheels/: $DS_PACKED"
	echo "CUDA libraries taken on the GPU machine: ${CUDA_SONAMES# }"
	echo
	echo "files (bytes):"
	(cd "$STAGE.tmp" && find . -type f -printf '%s\t%P\n' | sort -k2)
} >"$STAGE.tmp/MANIFEST.txt"

rm -rf "$STAGE"
mv "$STAGE.tmp" "$STAGE"

# ---- the carry: one xz archive (the libraries, OpenBLAS and SimGrid's ns-3 above all, are
# large and compress about 5x) and the manifest beside it --------------------------------
say "packing $CARRY_REL/stepgraph-gpu.tar.xz (xz -6)"
rm -rf "$CARRY.tmp"
mkdir -p "$CARRY.tmp"
tar -C "$STAGE" -cf - . | xz -T"$JOBS" -6 >"$CARRY.tmp/stepgraph-gpu.tar.xz" ||
	die "could not write $CARRY.tmp/stepgraph-gpu.tar.xz"
cp "$STAGE/MANIFEST.txt" "$CARRY.tmp/MANIFEST.txt"
rm -rf "$CARRY"
mv "$CARRY.tmp" "$CARRY"

stage_bytes=$(du -sb "$STAGE" | cut -f1)
carry_bytes=$(du -sb "$CARRY" | cut -f1)
tree_bytes=$(cd "$SEND_ROOT" && git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
shared_bytes=0
[ -d "$SEND_ROOT/shared" ] && shared_bytes=$(du -sb "$SEND_ROOT/shared" | cut -f1)
total=$((carry_bytes + tree_bytes + shared_bytes))
limit=$((LIMIT_MIB * 1024 * 1024))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
say "unpacked: $(mib "$stage_bytes") in $STAGE (lib: $(mib "$(du -sb "$STAGE/lib" | cut -f1)")$([ -d "$STAGE/lib-sim" ] && echo ", lib-sim: $(mib "$(du -sb "$STAGE/lib-sim" | cut -f1)")"))"
say "carry $CARRY_REL: $(mib "$carry_bytes")"
say "working tree that travels ($SEND_ROOT): $(mib "$tree_bytes")$([ "$shared_bytes" != 0 ] && echo " + shared/ $(mib "$shared_bytes")")"
say "upload in all: $(mib "$total") of the $LIMIT_MIB MiB limit"
if [ "$total" -gt "$limit" ]; then
	die "over the limit: leave something out (--no-sim saves lib-sim/ and stepgraph-sim)"
fi
echo "carry: [\"$CARRY_REL\"]"
[ -f "$SEND_ROOT/scripts/gpu_verify.sh" ] ||
	say "warning: $SEND_ROOT has no scripts/gpu_verify.sh: the device command below needs it there"
say "device run: command \"bash scripts/gpu_verify.sh --budget 480\", carry [\"$CARRY_REL\"], timeout_s 540 (docs/gpu.md)"
