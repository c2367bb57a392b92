#!/bin/sh
# netns_hosts.sh - several "hosts" on one machine, for multi-host runs
# (docs/ranks.md, "Several hosts"): each host is a network namespace with an
# address of its own on a private subnet, joined by a veth pair each to one
# bridge; Open MPI starts the ranks in them over TCP. Needs root (ip netns).
#
# As a command:
#   scripts/netns_hosts.sh [--hosts N] [--ranks-per-host R] -- PROGRAM ARGS...
# builds N hosts (2 by default, at most 250), runs
#   mpirun -np N*R --host ADDR1:R,ADDR2:R,... PROGRAM ARGS...
# across them (TCP only, on the hosts' subnet; mpirun options such as
# `-x VAR` may come first after --), removes everything it made (also on
# failure or interrupt) and exits with mpirun's status.
#
# As a library (`. scripts/netns_hosts.sh` with NH_LIB=1 set first):
#   nh_up N          makes hosts 1..N; NH_ADDR1.., NH_NS1.. name them
#   nh_mpirun R ARGS runs mpirun with R ranks per host (ARGS: PROGRAM ...)
#   nh_link I down|up   takes host I's link down or up (a partition)
#   nh_netem I ARGS  `tc qdisc replace ... netem ARGS` on host I's link (both
#                    ways; fails where the kernel has no sch_netem)
#   nh_rate I RATE   host I's link limited to RATE each way (htb)
#   nh_clear I       host I's link up, its queues back to the default
#   nh_down          kills what runs in the hosts, deletes them (idempotent)
# nh_up returns 2 with the reason in NH_WHY where namespaces cannot be made.
#
# Names carry this shell's process id (namespaces sgh<PID>h<I>, bridge
# sgb<PID>), the subnet is 10.123.X.0/24 with X from the process id: runs at
# the same time do not collide. Traffic stays on that subnet: the bridge has
# address .254 (mpirun's end), host I has .I.

NH_ID=$$
NH_NET="10.123.$((NH_ID % 250 + 1))"
NH_BR="sgb$NH_ID"
NH_N=0
NH_DIR=""

nh_up() { # nh_up N
	NH_WHY=""
	if [ "$(id -u)" != 0 ]; then
		NH_WHY="network namespaces need root"
		return 2
	fi
	for c in ip mpirun; do
		command -v $c >/dev/null 2>&1 || { NH_WHY="no $c on PATH"; return 2; }
	done
	if ! ip netns add "sgh${NH_ID}probe" 2>/dev/null; then
		NH_WHY="ip netns add fails here (no CAP_SYS_ADMIN or no namespace support)"
		return 2
	fi
	ip netns del "sgh${NH_ID}probe"
	NH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sg_netns.XXXXXX") || return 1
	ip link add "$NH_BR" type bridge || { NH_WHY="cannot create a bridge"; return 2; }
	ip addr add "$NH_NET.254/24" dev "$NH_BR" && ip link set "$NH_BR" up || return 1
	i=1
	: >"$NH_DIR/hosts"
	while [ $i -le "$1" ]; do
		ns="sgh${NH_ID}h$i"
		ip netns add "$ns" || return 1
		NH_N=$i
		ip link add "sgv${NH_ID}h$i" type veth peer name "sgp${NH_ID}h$i" || return 1
		ip link set "sgv${NH_ID}h$i" master "$NH_BR" up || return 1
		ip link set "sgp${NH_ID}h$i" netns "$ns" || return 1
		ip -n "$ns" link set "sgp${NH_ID}h$i" name eth0 || return 1
		ip -n "$ns" addr add "$NH_NET.$i/24" dev eth0 || return 1
		ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
		eval "NH_NS$i=$ns NH_ADDR$i=$NH_NET.$i"
		echo "$NH_NET.$i $ns" >>"$NH_DIR/hosts"
		i=$((i + 1))
	done
	# mpirun's remote-shell agent: `AGENT HOST COMMAND...` runs COMMAND in
	# the namespace whose address is HOST, under a hostname of its own (the
	# namespace's name, in a UTS namespace): with one hostname for all,
	# Open MPI's daemons made their session directories under the same
	# ompi.HOSTNAME path of the shared /tmp, and a daemon that lost the race
	# to mpirun for jf.N failed in orte_init ("mkdir ... File exists")
	cat >"$NH_DIR/agent.sh" <<EOF
#!/bin/sh
h=\$1
shift
ns=\$(awk -v h="\$h" '\$1 == h { print \$2 }' "$NH_DIR/hosts")
[ -n "\$ns" ] || { echo "netns_hosts agent: unknown host \$h" >&2; exit 1; }
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns || exit 1; \$*"
EOF
	chmod +x "$NH_DIR/agent.sh"
	return 0
}

# mpirun's daemons notice a lost host by TCP keepalive on their idle
# connections: Open MPI's default is 300 s, then probes 20 s apart. With
# NH_KEEPALIVE=S set: S idle seconds, then 3 probes 1 s apart (mpirun then
# ends a partitioned job itself, killing the ranks before their watchdog
# speaks if S is the shorter). Unset: as on a real cluster.
NH_KEEPALIVE=${NH_KEEPALIVE:-}

nh_mpirun() { # nh_mpirun RANKS_PER_HOST PROGRAM ARGS...
	rph=$1
	shift
	hosts="" i=1
	while [ $i -le "$NH_N" ]; do
		hosts="$hosts${hosts:+,}$NH_NET.$i:$rph"
		i=$((i + 1))
	done
	ka=""
	[ -n "$NH_KEEPALIVE" ] && ka="--mca oob_tcp_keepalive_time $NH_KEEPALIVE
		--mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3"
	# rtc hwloc off: orted segfaults in hwloc_shmem_topology_write inside a
	# namespace here (Open MPI 4.1.4). A fresh session directory for each
	# launch, under NH_DIR: a rank or host killed leaves its own behind, and
	# a later job whose 16-bit job family matched a leftover failed in
	# orte_init ("mkdir ... File exists")
	local sd
	sd=$(mktemp -d "$NH_DIR/ompi.XXXXXX") || return 1
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		mpirun --oversubscribe --bind-to none -np $((NH_N * rph)) --host "$hosts" \
		--mca plm_rsh_agent "$NH_DIR/agent.sh" --mca btl tcp,self \
		--mca btl_tcp_if_include "$NH_NET.0/24" --mca oob_tcp_if_include "$NH_NET.0/24" \
		--mca mpi_yield_when_idle 1 --mca rtc ^hwloc --mca orte_tmpdir_base "$sd" $ka "$@"
}

nh_link() { # nh_link I down|up: the host's side and the bridge's side
	ip -n "sgh${NH_ID}h$1" link set eth0 "$2" && ip link set "sgv${NH_ID}h$1" "$2"
}

# nh_qdisc I QDISC-ARGS...: both directions of host I's link (its own side,
# in its namespace, and the bridge's side) get `root QDISC-ARGS`
nh_qdisc() {
	h=$1
	shift
	tc -n "sgh${NH_ID}h$h" qdisc replace dev eth0 root "$@" &&
		tc qdisc replace dev "sgv${NH_ID}h$h" root "$@"
}

nh_netem() { # nh_netem I NETEM-ARGS...: loss, delay... (needs the kernel's sch_netem)
	h=$1
	shift
	nh_qdisc "$h" netem "$@"
}

nh_rate() { # nh_rate I RATE: host I's link limited to RATE each way (htb, e.g. 100mbit)
	nh_qdisc "$1" handle 1: htb default 10 r2q 100 &&
		tc -n "sgh${NH_ID}h$1" class add dev eth0 parent 1: classid 1:10 htb rate "$2" &&
		tc class add dev "sgv${NH_ID}h$1" parent 1: classid 1:10 htb rate "$2"
}

nh_clear() { # nh_clear I: host I's link back to the default queue, and up
	tc -n "sgh${NH_ID}h$1" qdisc del dev eth0 root 2>/dev/null
	tc qdisc del dev "sgv${NH_ID}h$1" root 2>/dev/null
	nh_link "$1" up
}

nh_down() {
	i=1
	while [ $i -le "$NH_N" ]; do
		ns="sgh${NH_ID}h$i"
		# what runs inside first (SIGCONT: a stopped process ends on SIGKILL too)
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -CONT "$p" 2>/dev/null
			kill -9 "$p" 2>/dev/null
		done
		ip link del "sgv${NH_ID}h$i" 2>/dev/null
		ip netns del "$ns" 2>/dev/null
		i=$((i + 1))
	done
	NH_N=0
	ip link del "$NH_BR" 2>/dev/null
	[ -n "$NH_DIR" ] && rm -rf "$NH_DIR"
	NH_DIR=""
	return 0
}

if [ -z "${NH_LIB:-}" ]; then
	hosts=2 rph=1
	while [ $# -gt 0 ]; do
		case $1 in
		--hosts) hosts=$2; shift 2 ;;
		--ranks-per-host) rph=$2; shift 2 ;;
		--) shift; break ;;
		-h | --help)
			sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
			exit 0 ;;
		*) echo "netns_hosts.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
		esac
	done
	case $hosts$rph in *[!0-9]* | '') echo "netns_hosts.sh: --hosts and --ranks-per-host take numbers" >&2; exit 2 ;; esac
	if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 250 ] || [ "$rph" -lt 1 ]; then
		echo "netns_hosts.sh: --hosts $hosts --ranks-per-host $rph: 1 to 250 hosts, 1 or more ranks each" >&2
		exit 2
	fi
	[ $# -gt 0 ] || { echo "netns_hosts.sh: no program (… -- PROGRAM ARGS)" >&2; exit 2; }
	trap 'nh_down' EXIT
	trap 'exit 130' INT TERM
	nh_up "$hosts"
	s=$?
	if [ $s -ne 0 ]; then
		echo "netns_hosts.sh: cannot make $hosts hosts: ${NH_WHY:-see above}" >&2
		exit $s
	fi
	echo "netns_hosts.sh: $hosts hosts on $NH_NET.0/24 ($rph ranks each)" >&2
	nh_mpirun "$rph" "$@"
	exit $?
fi
