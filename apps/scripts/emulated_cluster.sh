#!/usr/bin/env bash
# apps/scripts/emulated_cluster.sh: N "hosts" on one machine, to run any tandem program across them
# with mpiexec as on a real cluster (issue 28, item 1).
#
# Each host is a network namespace with its own address (10.77.0.<i+1> on its eth0) and its own
# host name (tdm-h<i>, a UTS namespace), joined by a bridge that lives in one more namespace of the
# script's own: no address, route or link is added outside the namespaces it made. MPICH's Hydra
# starts its proxies through `-launcher ssh -launcher-exec` this script, which stands in for ssh:
# it enters the host's namespaces instead of logging in. mpiexec itself runs on host 0.
#   - Ranks talk over TCP only (UCX_TLS=tcp,self): the namespaces share /dev/shm, and UCX's shared
#     memory would otherwise carry the bytes between "hosts" and bypass the links.
#   - --local DIR: DIR is each host's own local disk - a bind mount of <state>/h<i>/local over DIR,
#     in that host's mount namespace - so a file written there on one host is not seen on another.
#     Everything else (the working folder, the build) is shared, as NFS would be.
#   - --rate / --delay: every host's link limited (tc on its eth0, egress: a token bucket for the
#     rate, netem for the latency - where the kernel has sch_netem; this development VM's has not).
#     Over these links MPI's all-reduce (both directions at once) is bimodal from run to run: 4 MiB
#     at 100mbit took 355, 523 or 688 ms (1.06, 1.56, 2.05x the bytes' time; each run steady over its
#     repetitions), where one-way transfers keep the rate (apps/results/2026-11-28-cpu-2core/emulated_links).
#   - --stall-host H --stall-after S: S seconds after the start, host H's port on the bridge goes
#     down: its packets go nowhere, a host whose network stalls mid-run.
# It cleans up after itself on every way out, Ctrl-C and SIGTERM included (trap): every process left
# in its namespaces is killed, the namespaces are deleted, the state folder removed (--keep keeps it).
# A SIGTERM or SIGINT sent to the script goes to every rank of the program first (as a scheduler
# signals a job), then the script waits for mpiexec and cleans up.
#
# Needs iproute2 and root (ip netns, mount) - or, without root, unprivileged user namespaces: the
# script then runs itself inside `unshare -r -n -m` (one user namespace holds all the hosts; below).
# Where namespaces cannot be made it says why and exits 77, the test suite's "skipped".
#
#   sudo apps/scripts/emulated_cluster.sh --hosts 2 --ranks-per-host 2 -- build-cpu/apps/train_imagenet \
#       --synthetic --device cpu --model resnet_tiny --steps 20
#   ... --rate 100mbit --delay 1ms -- ...        links like 100 Mbit/s Ethernet
#   ... --local /mnt/local -- ...               each host's own /mnt/local
#
# Exit status: the program's (mpiexec's); 77 when namespaces cannot be made; 2 for a usage error.
set -u -o pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
subnet=10.77.0  # private (RFC 1918), and only inside the namespaces this script made

# --- the ssh stand-in: Hydra calls `<this script> -x <host> <proxy command...>` (-x: ssh's "no X11
# forwarding"), with TDM_CLUSTER_PREFIX in its environment (set below).
if [ "${1:-}" = "-x" ] && [ -n "${TDM_CLUSTER_PREFIX:-}" ]; then
  shift
  host=$1; shift
  i=$(( ${host##*.} - 1 ))
  prefix=${TDM_CLUSTER_PREFIX:?launcher-exec outside emulated_cluster.sh}
  # The command is for a remote shell (Hydra quotes the proxy's path), so a shell reads it.
  exec ip netns exec "${prefix}h$i" unshare --mount --uts --propagation private \
    bash -c 'hostname "$1"; if [ -n "$2" ]; then mount --bind "$3" "$2" || exit 1; fi; eval "exec $4"' \
    _ "tdm-h$i" "${TDM_CLUSTER_LOCAL:-}" "${TDM_CLUSTER_STATE:-}/h$i/local" "$*"
fi

usage() {
  sed -n '2,/^set -u/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'
  cat <<EOF
Options:
  --hosts N            hosts (network namespaces), default 2
  --ranks-per-host R   ranks on each host, default: this machine's cores / N (at least 1)
  --rate RATE          link rate of every host, tc's units (100mbit, 10gbit); default unlimited
  --delay DELAY        one-way latency added on every host's link (1ms, 200us); default none
  --local DIR          DIR is each host's own folder (bind mount); created here if missing
  --stall-host H       host H's link goes down --stall-after seconds into the run
  --stall-after S      default 10
  --name PREFIX        namespace names PREFIXh0.. and PREFIXsw (default tdm<pid>): tests use it to
                       find a host's processes (ip netns pids PREFIXh1)
  --keep               keep the state folder (per-host local folders, hostfile, logs)
EOF
}

args=("$@")  # as given: the rootless re-run (below) passes them again
hosts=2 per_host=0 rate="" delay="" local_dir="" stall_host="" stall_after=10 prefix="tdm$$" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --local) local_dir=$2; shift 2 ;;
    --stall-host) stall_host=$2; shift 2 ;;
    --stall-after) stall_after=$2; shift 2 ;;
    --name) prefix=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "emulated_cluster: unknown option '$1' (--help lists them; the program follows --)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "emulated_cluster: no program: put it after --, e.g. -- build-cpu/apps/train_imagenet ..." >&2; exit 2; }
[[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] ||
  { echo "emulated_cluster: --hosts takes 1..200, got '$hosts'" >&2; exit 2; }
[ "$per_host" = 0 ] && per_host=$(( $(nproc) / hosts )) && [ "$per_host" -lt 1 ] && per_host=1
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,20}$ ]] || { echo "emulated_cluster: --name takes lower-case letters and digits" >&2; exit 2; }

# --- can namespaces be made here?
skip() { echo "emulated_cluster: SKIPPED: $1" >&2; exit 77; }
# Rootless: without root, the script runs itself again inside a user namespace of its own where it is
# root (unshare -r), with its own network and mount namespaces; a tmpfs on /run there gives `ip netns`
# its /run/netns. Every namespace it then makes belongs to that user namespace: no privilege outside
# it. Kernels or containers that refuse unprivileged user namespaces: skipped, saying so.
if [ "$(id -u)" != 0 ]; then
  [ -z "${TDM_CLUSTER_ROOTLESS:-}" ] || skip "no root inside the user namespace (unshare -r)"
  command -v unshare > /dev/null || skip "needs root, or unshare (util-linux) for a user namespace"
  unshare -r -n -m true 2> /dev/null ||
    skip "needs root (sudo), or unprivileged user namespaces (unshare -r -n -m was refused: kernel.unprivileged_userns_clone, user.max_user_namespaces or a container's seccomp)"
  TDM_CLUSTER_ROOTLESS=1 exec unshare -r -n -m --propagation private \
    bash -c 'mount -t tmpfs tmpfs /run || exit 77; exec bash "$0" "$@"' "$self" "${args[@]}"
fi
command -v ip > /dev/null || skip "no 'ip' (apt-get install iproute2)"
command -v mpiexec > /dev/null || skip "no mpiexec (MPICH's Hydra)"
[ -z "$rate$delay" ] || command -v tc > /dev/null || skip "no 'tc' for --rate/--delay/--stall-host (iproute2)"
ip netns add "${prefix}probe" 2> /dev/null || skip "'ip netns add' was refused (a container without CAP_SYS_ADMIN?)"
ip netns del "${prefix}probe"

state=$(mktemp -d /tmp/emulated_cluster.XXXXXX)
mpiexec_pid=""
cleanup() {
  trap '' INT TERM
  [ -n "${stall_pid:-}" ] && kill "$stall_pid" 2> /dev/null
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^${prefix}\(h[0-9]*\|sw\)$"); do
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2> /dev/null
    ip netns del "$ns" 2> /dev/null
  done
  if [ "$keep" = 1 ]; then echo "emulated_cluster: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
# A stop request goes to every rank (the processes inside the hosts), as a scheduler sends it; not
# to mpiexec and its proxies, whose own forwarding would send it twice and whose exit status after
# a forwarded signal is unreliable (apps/trainer/run/preemption.h).
forward() {
  for i in $(seq 0 $((hosts - 1))); do
    for pid in $(ip netns pids "${prefix}h$i" 2> /dev/null); do
      case "$(cat /proc/"$pid"/comm 2> /dev/null)" in mpiexec*|hydra_pmi_proxy) ;; *) kill -"$1" "$pid" 2> /dev/null ;; esac
    done
  done
}
# A second request ends everything at once (a run hung in its teardown, say), cleaning up on the way out.
stops=0
stop() {
  stops=$((stops + 1))
  if [ "$stops" -gt 1 ]; then echo "emulated_cluster: second stop request: killing every process of the hosts" >&2; exit 143; fi
  forward "$1"
}
trap 'stop TERM' TERM
trap 'stop INT' INT

# --- the hosts and their links
ip netns add "${prefix}sw" && ip -n "${prefix}sw" link add br0 type bridge && ip -n "${prefix}sw" link set br0 up ||
  skip "could not make the switch namespace and bridge"
# The links: latency by netem, the rate by a token bucket (tbf, with a queue of at most 400 ms, tc's
# usual example). Its burst: 1 ms at the rate, at least 64 KiB - one TSO/GSO packet of the veth (a
# 32 kbit burst, tc's example for slow links, holds less than one such packet, and the token bucket
# then throttles a 1-10 Gbit/s link below its rate). netem is a module some kernels lack: said, not guessed.
# burst_bytes RATE: 1 ms of RATE in bytes (tc's units: kbit, mbit, gbit; bit/s when bare), at least 64 KiB.
burst_bytes() {
  local r=${1,,} mult=1
  case "$r" in *gbit) mult=1000000000 ;; *mbit) mult=1000000 ;; *kbit) mult=1000 ;; *bit) ;; esac
  r=${r%%[a-z]*}
  awk -v r="$r" -v m="$mult" 'BEGIN { b = r * m / 8 / 1000; if (b < 65536) b = 65536; printf "%d", b }'
}
limit_link() {
  local ns=$1 parent="root"
  if [ -n "$delay" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$delay" ||
      { echo "emulated_cluster: tc refused 'netem delay $delay' (a kernel without sch_netem has no --delay)" >&2; exit 2; }
    parent="parent 1:1"
  fi
  if [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 $parent handle 10: tbf rate "$rate" burst "$(burst_bytes "$rate")" latency 400ms ||
      { echo "emulated_cluster: tc refused 'tbf rate $rate'" >&2; exit 2; }
  fi
}
netem="${delay:+ delay $delay}${rate:+ rate $rate}"
: > "$state/hostfile"
for i in $(seq 0 $((hosts - 1))); do
  ns="${prefix}h$i"
  ip netns add "$ns" &&
    ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "${prefix}sw" &&
    ip -n "${prefix}sw" link set "p$i" master br0 up &&
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 &&
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || skip "could not make host $i's namespace and link"
  limit_link "$ns"
  mkdir -p "$state/h$i/local"
  echo "$subnet.$((i + 1)):$per_host" >> "$state/hostfile"
done
if [ -n "$local_dir" ]; then
  case "$local_dir" in /*) ;; *) local_dir=$(pwd)/$local_dir ;; esac
  mkdir -p "$local_dir"
fi

# --- the run: mpiexec on host 0, each rank's environment its own (TCP between hosts). mpiexec ignores
# SIGPIPE: over UCX's TCP transport MPI_Finalize now and then never returns, and a rank then exits
# with its status after 10 s (dist/transport/bootstrap.cpp, finalize); Hydra, writing to that rank's
# closed socket, would otherwise die of SIGPIPE (status 141) instead of reporting the status.
export TDM_CLUSTER_PREFIX=$prefix TDM_CLUSTER_STATE=$state TDM_CLUSTER_LOCAL=$local_dir
export UCX_TLS=${UCX_TLS:-tcp,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-eth0}
export HYDRA_LAUNCHER=ssh  # overrides a HYDRA_LAUNCHER=fork the caller may have set for one-host runs
echo "emulated_cluster: $hosts host(s) x $per_host rank(s) (tdm-h0..tdm-h$((hosts - 1)), $subnet.1..$hosts)${netem:+, links:$netem}${local_dir:+, local $local_dir}" >&2
ip netns exec "${prefix}h0" unshare --mount --uts --propagation private bash -c \
  'hostname tdm-h0; if [ -n "$TDM_CLUSTER_LOCAL" ]; then mount --bind "$TDM_CLUSTER_STATE/h0/local" "$TDM_CLUSTER_LOCAL" || exit 1; fi
   trap "" PIPE; exec mpiexec -launcher ssh -launcher-exec "$0" -localhost '"$subnet"'.1 -f "$TDM_CLUSTER_STATE/hostfile" "$@"' \
  "$self" -n $((hosts * per_host)) "$@" &
mpiexec_pid=$!
stall_pid=""
if [ -n "$stall_host" ]; then
  ( sleep "$stall_after"
    ip -n "${prefix}sw" link set "p$stall_host" down &&
      echo "emulated_cluster: host tdm-h$stall_host's link stalled (its switch port down) after $stall_after s" >&2 ) &
  stall_pid=$!
fi
# `wait` returns early when a trapped signal arrives: wait again until mpiexec is gone.
while :; do
  wait "$mpiexec_pid"; rc=$?
  kill -0 "$mpiexec_pid" 2> /dev/null || break
done
exit "$rc"
