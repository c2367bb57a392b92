#!/usr/bin/env bash
# Set up everything stepgraph needs on a Debian 12 machine (run as root):
#   1. the Debian packages (only those missing),
#   2. StarPU 1.4.10 built from Debian's source package, in two flavours:
#        native  - CPU (+ CUDA when nvcc is found), FxT tracing
#        simgrid - StarPU's SimGrid simulation mode
#      each installed once into a cache prefix keyed by version, flavour and configure flags,
#   3. .deps-build/env.sh in the repository root, to be sourced before ./configure,
#   4. best effort, the `tokenizers` package (PyPI) for scripts/tokenize.sh, in the
#      virtual environment ~/.cache/stepgraph/venv-bench,
#   5. with --arm64 only, for a build for AArch64 (Grace; scripts/check_arm64.sh):
#      Debian's arm64 libraries next to the amd64 ones (dpkg's multiarch) and a
#      third StarPU flavour, cross-built for aarch64-linux-gnu.
#
# Idempotent: a second run installs and builds nothing.
#
# Environment:
#   STEPGRAPH_DEPS_DIR  where the StarPU source package lies (default: <repo>/../shared/deps);
#                       without it the source comes from Debian unstable via `apt-get source`
#   STEPGRAPH_CACHE     root of the install prefixes (default: ${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph)
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
	cat <<'EOF'
usage: scripts/setup.sh [--no-simgrid] [--arm64] [--print-env] [--help]

Installs the Debian packages stepgraph needs, builds StarPU 1.4.10 (native and simgrid
flavours) into a cache directory when not built yet, and writes .deps-build/env.sh.

  --no-simgrid  do not build the SimGrid flavour of StarPU
  --arm64       also install Debian's arm64 libraries (adds the arm64 architecture to
                dpkg) and cross-build StarPU for aarch64-linux-gnu, for
                scripts/check_arm64.sh (STARPU_ARM64_PREFIX in .deps-build/env.sh)
  --print-env   only print the environment exports (the content of .deps-build/env.sh)
  --help        show this help

Environment: STEPGRAPH_DEPS_DIR (StarPU source package, default ../shared/deps),
STEPGRAPH_CACHE (install prefixes, default ${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph).
EOF
}

want_simgrid=1
want_arm64=0
print_env_only=0
for arg in "$@"; do
	case "$arg" in
	--no-simgrid) want_simgrid=0 ;;
	--arm64) want_arm64=1 ;;
	--print-env) print_env_only=1 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown option: $arg" ;;
	esac
done

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

STARPU_VERSION=1.4.10
STARPU_DEB_VERSION=1.4.10+dfsg-2
STARPU_DSC="starpu_${STARPU_DEB_VERSION}.dsc"
# Bump when the source fix applied below changes, so that old prefixes are not reused.
STARPU_FIX_REV=cuda13-computemode-1

CACHE_ROOT="${STEPGRAPH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph}"
DEPS_DIR="${STEPGRAPH_DEPS_DIR:-$REPO_ROOT/../shared/deps}"
STAMP_NAME=.stepgraph-built
JOBS=$(nproc 2>/dev/null || echo 2)

PACKAGES=(
	build-essential autoconf automake libtool libltdl-dev pkg-config
	libcjson-dev libhwloc-dev libnuma-dev libopenblas-dev libfxt-dev libsimgrid-dev
	graphviz python3 python3-torch python3-numpy python3-venv vim-runtime
	dpkg-dev xz-utils ca-certificates
	# scripts/fuzz.sh and scripts/sanitize.sh: libFuzzer, ASan and UBSan runtimes
	clang libclang-rt-14-dev
	# scripts/format.sh and tests/test_format.sh: the house style (.clang-format)
	clang-format
	# tests/test_graph_html.sh: the graph page checked in a real (headless) browser
	chromium
	# several data-parallel ranks (docs/ranks.md): mpirun and MPI for stepgraph
	# itself (StarPU keeps --disable-mpi: collectives are MPI calls inside tasks)
	openmpi-bin libopenmpi-dev
	# tests/test_adam_neon.sh: CPU Adam's AArch64 (Grace) variant, cross-built and
	# run under qemu against the x86 variants
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
)

# ---------------------------------------------------------------- CUDA detection
CUDA_DIR=""
if [ -x /usr/local/cuda/bin/nvcc ]; then
	CUDA_DIR=/usr/local/cuda
elif nvcc_path=$(command -v nvcc 2>/dev/null); then
	CUDA_DIR=$(cd "$(dirname "$(readlink -f "$nvcc_path")")/.." && pwd)
fi

# ---------------------------------------------------------------- configure flags
COMMON_FLAGS=(
	--enable-maxcpus=256 --enable-maxnumanodes=16 --enable-maxcudadev=16
	--disable-build-tests --disable-build-examples --disable-static --disable-build-doc
	--disable-opencl --disable-mpi --disable-socl --disable-fortran --disable-starpufft
	--disable-starpupy --disable-openmp
)
NATIVE_FLAGS=("${COMMON_FLAGS[@]}")
if [ -n "$CUDA_DIR" ]; then
	NATIVE_FLAGS+=(--enable-cuda "--with-cuda-dir=$CUDA_DIR")
	# CUDA's libraries live in lib64 on Linux; name the directories so configure needs no guess.
	[ -d "$CUDA_DIR/include" ] && NATIVE_FLAGS+=("--with-cuda-include-dir=$CUDA_DIR/include")
	[ -d "$CUDA_DIR/lib64" ] && NATIVE_FLAGS+=("--with-cuda-lib-dir=$CUDA_DIR/lib64")
else
	NATIVE_FLAGS+=(--disable-cuda)
fi
SIMGRID_FLAGS=("${COMMON_FLAGS[@]}" --enable-simgrid)
# For AArch64 (Grace), CPU only: Debian's cross compilers and the arm64 libraries
# that dpkg's multiarch installs under /usr/lib/aarch64-linux-gnu.
ARM64_FLAGS=("${COMMON_FLAGS[@]}" --disable-cuda --host=aarch64-linux-gnu
	CXX=aarch64-linux-gnu-g++
	PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
ARM64_PACKAGES=(g++-aarch64-linux-gnu libc6-dev:arm64 libopenblas-dev:arm64
	libhwloc-dev:arm64 libcjson-dev:arm64 libnuma-dev:arm64 libltdl-dev:arm64)

# prefix_for FLAVOUR FLAGS... : the cache prefix for a flavour built with these flags
prefix_for() {
	local flavour=$1 hash
	shift
	hash=$(printf '%s\n' "$STARPU_DEB_VERSION" "$STARPU_FIX_REV" "$@" | sha256sum | cut -c1-10)
	printf '%s/starpu-%s-%s-%s' "$CACHE_ROOT" "$STARPU_VERSION" "$flavour" "$hash"
}

is_built() {
	[ -f "$1/lib/pkgconfig/starpu-1.4.pc" ] && [ -f "$1/$STAMP_NAME" ]
}

NATIVE_PREFIX=$(prefix_for native "${NATIVE_FLAGS[@]}")
SIMGRID_PREFIX=$(prefix_for simgrid "${SIMGRID_FLAGS[@]}")
ARM64_PREFIX=$(prefix_for arm64 "${ARM64_FLAGS[@]}")

# ---------------------------------------------------------------- env file
print_env() {
	local simgrid_prefix="" cfg=""
	if [ "$want_simgrid" = 1 ] || is_built "$SIMGRID_PREFIX"; then
		simgrid_prefix=$SIMGRID_PREFIX
		cfg="--with-starpu-simgrid=$SIMGRID_PREFIX"
	fi
	if [ -n "$CUDA_DIR" ]; then
		cfg="${cfg:+$cfg }--with-cuda=$CUDA_DIR"
	fi
	cat <<EOF
# Generated by scripts/setup.sh; source it before ./configure (safe to source twice).
export STARPU_NATIVE_PREFIX="$NATIVE_PREFIX"
export STARPU_SIMGRID_PREFIX="$simgrid_prefix"
case ":\${PKG_CONFIG_PATH:-}:" in
*":\$STARPU_NATIVE_PREFIX/lib/pkgconfig:"*) ;;
*) export PKG_CONFIG_PATH="\$STARPU_NATIVE_PREFIX/lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}" ;;
esac
case ":\${LD_LIBRARY_PATH:-}:" in
*":\$STARPU_NATIVE_PREFIX/lib:"*) ;;
*) export LD_LIBRARY_PATH="\$STARPU_NATIVE_PREFIX/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" ;;
esac
case ":\${PATH:-}:" in
*":\$STARPU_NATIVE_PREFIX/bin:"*) ;;
*) export PATH="\$STARPU_NATIVE_PREFIX/bin\${PATH:+:\$PATH}" ;;
esac
export STEPGRAPH_CONFIGURE_FLAGS="$cfg"
EOF
	if is_built "$ARM64_PREFIX"; then
		printf 'export STARPU_ARM64_PREFIX="%s"\n' "$ARM64_PREFIX"
	fi
}

if [ "$print_env_only" = 1 ]; then
	is_built "$NATIVE_PREFIX" || log "warning: native StarPU is not built yet at $NATIVE_PREFIX (run scripts/setup.sh)"
	print_env
	exit 0
fi

# ---------------------------------------------------------------- Debian packages
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run: $*"
	fi
}

pkg_installed() {
	# one line per architecture installed (multiarch: amd64 and arm64 after --arm64);
	# read whole before matching, so that no early exit of grep breaks the pipe
	local st
	st=$(dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null) || return 1
	grep -qx installed <<<"$st"
}

apt_get() {
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -y -q "$@"
}

install_packages() {
	local missing=() p
	for p in "$@"; do
		pkg_installed "$p" || missing+=("$p")
	done
	if [ "${#missing[@]}" -eq 0 ]; then
		log "Debian packages: all ${#} present"
		return 0
	fi
	log "Debian packages: installing ${missing[*]}"
	apt_get update
	apt_get install "${missing[@]}"
}

if [ -r /etc/os-release ]; then
	# shellcheck disable=SC1091
	. /etc/os-release
	if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
		log "warning: made for Debian 12, this is ${PRETTY_NAME:-unknown}; going on"
	fi
fi
command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script needs Debian"

install_packages "${PACKAGES[@]}"
if [ "$want_arm64" = 1 ]; then
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		log "dpkg: adding the arm64 architecture (for --arm64)"
		as_root dpkg --add-architecture arm64
		apt_get update
	fi
	install_packages "${ARM64_PACKAGES[@]}"
fi

# ---------------------------------------------------------------- StarPU source
# apt_source_uri: the URI of the machine's own Debian archive (never a hard-coded mirror)
apt_source_uri() {
	local uri=""
	local f
	# deb822 files: the URIs of a stanza that lists the main archive (not -security, -updates...)
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		uri=$(awk '
			function flush() {
				if (uris != "" && types ~ /(^| )deb( |$)/ && main) { print uris; found = 1; exit }
				uris = ""; types = ""; main = 0
			}
			/^[[:space:]]*$/ { flush(); next }
			/^[[:space:]]*#/ { next }
			tolower($1) == "types:"  { types = substr($0, index($0, ":") + 1) }
			tolower($1) == "uris:"   { uris = $2 }
			tolower($1) == "suites:" {
				for (i = 2; i <= NF; i++)
					if ($i ~ /^(bookworm|bullseye|trixie|forky|stable|testing|unstable|sid)$/) main = 1
			}
			END { if (!found) flush() }
		' "$f" | head -n1)
		[ -n "$uri" ] && break
	done
	if [ -z "$uri" ]; then
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -r "$f" ] || continue
			uri=$(awk '
				$1 == "deb" {
					i = 2
					if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
					if ($(i + 1) ~ /^(bookworm|bullseye|trixie|forky|stable|testing|unstable|sid)$/) { print $i; exit }
				}' "$f")
			[ -n "$uri" ] && break
		done
	fi
	printf '%s' "$uri"
}

# fetch_source DIR: put the unpacked StarPU source tree at DIR/src
fetch_source() {
	local work=$1
	if [ -f "$DEPS_DIR/$STARPU_DSC" ]; then
		log "StarPU source: verifying $DEPS_DIR with SHA256SUMS"
		[ -f "$DEPS_DIR/SHA256SUMS" ] || die "$DEPS_DIR/SHA256SUMS is missing"
		(cd "$DEPS_DIR" && sha256sum --quiet -c SHA256SUMS) ||
			die "checksum mismatch in $DEPS_DIR (see above); refusing to build from it"
		log "StarPU source: unpacking $STARPU_DSC (with Debian's patches)"
		dpkg-source --no-copy -x "$DEPS_DIR/$STARPU_DSC" "$work/src" >"$work/unpack.log" 2>&1 ||
			{ cat "$work/unpack.log" >&2; die "dpkg-source -x failed"; }
		return 0
	fi

	log "StarPU source: $DEPS_DIR/$STARPU_DSC not found; fetching it from Debian unstable"
	local uri list=/etc/apt/sources.list.d/stepgraph-unstable-src.sources
	uri=$(apt_source_uri)
	[ -n "$uri" ] || die "could not find a Debian archive URI in /etc/apt/sources.list{,.d}; put the StarPU source package in $DEPS_DIR"
	if [ ! -f "$list" ]; then
		log "StarPU source: adding deb-src for unstable from $uri in $list"
		local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
		{
			printf 'Types: deb-src\nURIs: %s\nSuites: unstable\nComponents: main\n' "$uri"
			[ -f "$keyring" ] && printf 'Signed-By: %s\n' "$keyring"
		} | as_root tee "$list" >/dev/null
	fi
	apt_get update
	local ver
	ver=$(apt-cache showsrc starpu 2>/dev/null | awk '$1 == "Version:" { print $2 }' | sort -V | tail -n1)
	log "StarPU source: Debian unstable has starpu $ver"
	(
		cd "$work"
		if ! apt-get source -q --download-only "starpu=$STARPU_DEB_VERSION" >download.log 2>&1; then
			case "$ver" in
			"$STARPU_VERSION"+*) apt-get source -q --download-only "starpu=$ver" >download.log 2>&1 ;;
			*) cat download.log >&2
			   die "Debian unstable no longer has StarPU $STARPU_VERSION (it has ${ver:-nothing}); put starpu_${STARPU_DEB_VERSION}.* in $DEPS_DIR" ;;
			esac
		fi
	) || { cat "$work/download.log" >&2; die "apt-get source starpu failed"; }
	local dscs=("$work"/starpu_"$STARPU_VERSION"+*.dsc)
	local dsc=${dscs[0]}
	[ -f "$dsc" ] || die "apt-get source left no starpu_$STARPU_VERSION+*.dsc in $work"
	log "StarPU source: unpacking $(basename "$dsc")"
	dpkg-source -x "$dsc" "$work/src" >"$work/unpack.log" 2>&1 ||
		{ cat "$work/unpack.log" >&2; die "dpkg-source -x failed"; }
}

# fix_cuda13 SRC: CUDA 13 removed cudaDeviceProp.computeMode; ask for the attribute instead.
fix_cuda13() {
	local src=$1 f n
	for f in "$src/src/drivers/cuda/driver_cuda.c" "$src/src/drivers/cuda/driver_cuda1.c"; do
		[ -f "$f" ] || die "expected $f in the StarPU source"
		n=$(grep -c 'props\[devid\]\.computeMode' "$f" || true)
		if [ "$n" = 0 ]; then
			log "CUDA 13 fix: $(basename "$f") has no computeMode read, nothing to do"
			continue
		fi
		sed -i 's/^\([[:space:]]*\)if (props\[devid\]\.computeMode == cudaComputeModeExclusive)$/\1int sg_compute_mode = 0;\n\1if (cudaDeviceGetAttribute(\&sg_compute_mode, cudaDevAttrComputeMode, devid) == cudaSuccess \&\& sg_compute_mode == cudaComputeModeExclusive)/' "$f"
		if grep -q 'computeMode' "$f" || ! grep -q 'cudaDevAttrComputeMode' "$f"; then
			die "CUDA 13 fix did not apply cleanly to $f (the code changed?)"
		fi
		log "CUDA 13 fix: patched $n computeMode read(s) in $(basename "$f")"
	done
}

# ---------------------------------------------------------------- StarPU build
# build_flavour NAME PREFIX SRC WORK FLAGS...
build_flavour() {
	local name=$1 prefix=$2 src=$3 work=$4
	shift 4
	local bdir="$work/build-$name" t0 t1
	mkdir -p "$bdir"
	# A prefix without the stamp is what an interrupted build left: start it again.
	rm -rf "$prefix"
	t0=$(date +%s)
	log "StarPU $name: configure ($*)"
	(cd "$bdir" && "$src/configure" --prefix="$prefix" "$@") >"$bdir/configure.out" 2>&1 ||
		{ tail -n 40 "$bdir/configure.out" >&2; die "StarPU $name: configure failed (full log: $bdir/configure.out, $bdir/config.log)"; }
	log "StarPU $name: make -j$JOBS"
	make -C "$bdir" -j"$JOBS" >"$bdir/make.out" 2>&1 ||
		{ grep -E -B2 -A8 'error|Error' "$bdir/make.out" | tail -n 60 >&2; die "StarPU $name: make failed (full log: $bdir/make.out)"; }
	log "StarPU $name: make install into $prefix"
	make -C "$bdir" install >"$bdir/install.out" 2>&1 ||
		{ tail -n 40 "$bdir/install.out" >&2; die "StarPU $name: make install failed (full log: $bdir/install.out)"; }
	[ -f "$prefix/lib/pkgconfig/starpu-1.4.pc" ] || die "StarPU $name: $prefix/lib/pkgconfig/starpu-1.4.pc was not installed"
	t1=$(date +%s)
	# Written last: its presence means the prefix is complete.
	printf 'starpu %s (%s) %s\nflags: %s\nbuilt: %s in %ss\n' \
		"$STARPU_DEB_VERSION" "$STARPU_FIX_REV" "$name" "$*" "$(date -u +%FT%TZ)" "$((t1 - t0))" \
		>"$prefix/$STAMP_NAME"
	log "StarPU $name: built in $((t1 - t0))s, $(du -sh "$prefix" | cut -f1) installed"
}

todo=()
if is_built "$NATIVE_PREFIX"; then
	log "StarPU native: already built at $NATIVE_PREFIX"
else
	todo+=(native)
fi
if [ "$want_simgrid" = 1 ]; then
	if is_built "$SIMGRID_PREFIX"; then
		log "StarPU simgrid: already built at $SIMGRID_PREFIX"
	else
		todo+=(simgrid)
	fi
else
	log "StarPU simgrid: skipped (--no-simgrid)"
fi
if [ "$want_arm64" = 1 ]; then
	if is_built "$ARM64_PREFIX"; then
		log "StarPU arm64: already built at $ARM64_PREFIX"
	else
		todo+=(arm64)
	fi
fi

if [ "${#todo[@]}" -gt 0 ]; then
	mkdir -p "$CACHE_ROOT"
	# Two setups at once (two shells, two CI jobs) would build into the same prefix.
	exec 9>"$CACHE_ROOT/.lock"
	if command -v flock >/dev/null 2>&1; then
		flock 9 || die "could not lock $CACHE_ROOT/.lock"
	fi
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/stepgraph-starpu.XXXXXX")
	cleanup() {
		local rc=$?
		if [ "$rc" = 0 ] || ! compgen -G "$WORK/build-*" >/dev/null; then
			rm -rf "$WORK"
		else
			log "build directory kept for inspection: $WORK"
		fi
	}
	trap cleanup EXIT
	if [ -n "$CUDA_DIR" ]; then
		log "CUDA: found at $CUDA_DIR; the native flavour is built with CUDA"
	else
		log "CUDA: no nvcc found; the native flavour is built without CUDA"
	fi
	fetch_source "$WORK"
	fix_cuda13 "$WORK/src"
	for flavour in "${todo[@]}"; do
		# Recheck under the lock: another setup may have built it meanwhile.
		case "$flavour" in
		native)
			is_built "$NATIVE_PREFIX" || build_flavour native "$NATIVE_PREFIX" "$WORK/src" "$WORK" "${NATIVE_FLAGS[@]}" ;;
		simgrid)
			is_built "$SIMGRID_PREFIX" || build_flavour simgrid "$SIMGRID_PREFIX" "$WORK/src" "$WORK" "${SIMGRID_FLAGS[@]}" ;;
		arm64)
			is_built "$ARM64_PREFIX" || build_flavour arm64 "$ARM64_PREFIX" "$WORK/src" "$WORK" "${ARM64_FLAGS[@]}" ;;
		esac
	done
fi

# ---------------------------------------------------------------- Python tools
# scripts/tokenize.sh needs the `tokenizers` package, which Debian 12 does not
# ship: it goes into the virtual environment the benchmarks and
# scripts/check_hf_export.sh use. Best effort: without PyPI, setup goes on and
# tokenize.sh tries again on first use (its tests are skipped meanwhile).
TOOLS_VENV=${STEPGRAPH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph}/venv-bench
# jinja2 renders models' chat templates (scripts/prepare_instruct.py).
if ! "$TOOLS_VENV/bin/python" -c 'import tokenizers, jinja2' 2>/dev/null; then
	log "Python tools: tokenizers and jinja2 from PyPI into $TOOLS_VENV"
	if { [ -x "$TOOLS_VENV/bin/python" ] || python3 -m venv "$TOOLS_VENV"; } &&
		timeout 300 "$TOOLS_VENV/bin/pip" install -q tokenizers jinja2; then
		log "Python tools: tokenizers $("$TOOLS_VENV/bin/python" -c 'import tokenizers; print(tokenizers.__version__)')"
	else
		log "Python tools: could not install tokenizers (no PyPI?); scripts/tokenize.sh will try again"
	fi
fi

# ---------------------------------------------------------------- env file
mkdir -p "$REPO_ROOT/.deps-build"
print_env >"$REPO_ROOT/.deps-build/env.sh.tmp"
mv "$REPO_ROOT/.deps-build/env.sh.tmp" "$REPO_ROOT/.deps-build/env.sh"
log "StarPU native:  $NATIVE_PREFIX"
[ "$want_simgrid" = 1 ] && log "StarPU simgrid: $SIMGRID_PREFIX"
[ "$want_arm64" = 1 ] && log "StarPU arm64:   $ARM64_PREFIX"
log "wrote .deps-build/env.sh (source it, then ./configure \$STEPGRAPH_CONFIGURE_FLAGS)"
