#!/usr/bin/env bash
# apps/scripts/elastic.sh: a restart supervisor for tandem's trainers under mpiexec, in the spirit of
# torchrun's --max-restarts and Horovod Elastic: it runs the job, and after a failure or a
# preemption it runs it again on the ranks (or hosts) still available, resuming from the newest
# checkpoint (--resume auto). Each attempt ends with one summary line; the last line says why the
# supervisor stopped.
#
#   bash apps/scripts/elastic.sh --ranks 4 --min-ranks 2 --max-restarts 3 -- \
#       build/apps/train_imagenet --data data_default --model resnet_tiny --epochs 24 --checkpoint-dir ck
#   bash apps/scripts/elastic.sh --hostfile hosts --max-restarts 5 -- build/apps/train_encoder ... --checkpoint-dir ck
#
# Policy (what it does after each attempt, in this order):
#   finished (exit 0)                      exit 0.
#   the supervisor itself got SIGTERM, SIGINT or SIGUSR1 (the scheduler's preemption): it passed the
#     signal to mpiexec, which forwards it to every rank; the ranks save and exit 75. The supervisor
#     does not restart (the scheduler wants the job gone) and exits 75 when the ranks reported the
#     preemption - reliably, unlike mpiexec's own status after a signal (apps/trainer/run/preemption.h) -
#     else with the attempt's status.
#   usage error (2), a non-finite stop (3) or a data error (65): exit with it; a rerun would fail the
#     same way (the statuses are the trainers' table, apps/trainer/run/exit_status.h).
#   The checkpoint folder's run_status.json (written by the job's rank 0) is read after each attempt
#     (apps/scripts/run_status.py): where it recorded this attempt's end, its status stands when
#     mpiexec's says less - 0 after a preemption (a Hydra race), or MPI_Abort's 1 after a data error.
#   preempted without a signal to the supervisor (a rank was signalled directly): rerun, same ranks.
#   a rank died - killed by a signal (status 137 or 9, "Killed (signal 9)"), or named by tandem's
#     watchdog ("rank(s) X did not reach collective"): rerun with that many ranks fewer on one host
#     (the rank's device or memory may be what failed); with --hostfile, on the hosts that still
#     answer ssh (BatchMode, 5 s), all their slots. A rank killed by signal 9 is often the host's
#     out-of-memory killer: the summary says whether the cgroup's counter (memory.events or
#     memory.oom_control: oom_kill) went up during the attempt, and suggests a lower --batch.
#   any other failure: rerun, same ranks (a transient error).
#   Never more than --max-restarts reruns, never on fewer than --min-ranks ranks.
# From the second attempt on `--resume auto` is added to the program's arguments (unless they name
# --resume already), so the job needs --checkpoint-dir; a resume on another world size is the
# trainer's business (its progress is kept in samples).
#
# Options:
#   --ranks N            ranks of the first attempt (with --hostfile: at most N; default all slots)
#   --min-ranks M        fewest ranks worth going on with (default 1)
#   --max-restarts K     reruns after the first attempt (default 3)
#   --hostfile FILE      MPICH host file, one "host[:slots]" per line
#   --mpiexec-args ARGS  more mpiexec flags, e.g. "-ppn 8" (one string, split on spaces)
#   --log-dir DIR        each attempt's output in DIR/attempt<N>.log (default: a new temporary folder)
#   --first-env VAR=VAL  set VAR in the first attempt only (failure drills: TANDEM_FAULT=3:40:kill); repeatable
# Exit status: 0 finished, 75 preempted (passed through), else the last attempt's status (or 1):
# the trainers' table (0 completed, 1 failed at run time, 2 usage error, 3 non-finite stop, 65 data
# or input error, 75 preempted); 2 also for this script's own usage errors.
set -u -o pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "elastic: $*" >&2; exit 2; }

ranks="" min_ranks=1 max_restarts=3 hostfile="" mpiexec_args="" log_dir="" first_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --min-ranks) min_ranks="$2"; shift 2 ;;
    --max-restarts) max_restarts="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    --mpiexec-args) mpiexec_args="$2"; shift 2 ;;
    --log-dir) log_dir="$2"; shift 2 ;;
    --first-env) first_env+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the program and its arguments go after --; --help lists the options)" ;;
  esac
done
[ $# -gt 0 ] || die "no program: elastic.sh [options] -- PROGRAM [ARGS...] (--help lists the options)"
program=("$@")
is_count() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_count "$min_ranks" && [ "$min_ranks" -ge 1 ] || die "--min-ranks must be a positive integer, got '$min_ranks'"
is_count "$max_restarts" || die "--max-restarts must be a non-negative integer, got '$max_restarts'"
[ -z "$ranks" ] || { is_count "$ranks" && [ "$ranks" -ge 1 ]; } || die "--ranks must be a positive integer, got '$ranks'"
[ -n "$ranks" ] || [ -n "$hostfile" ] || die "pass --ranks N (one host) or --hostfile FILE"
[ -z "$hostfile" ] || [ -r "$hostfile" ] || die "cannot read --hostfile '$hostfile'"
for e in "${first_env[@]+"${first_env[@]}"}"; do [[ "$e" == *=* ]] || die "--first-env takes VAR=VALUE, got '$e'"; done
has_arg() { local a; for a in "${program[@]}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
has_arg --checkpoint-dir || die "the program has no --checkpoint-dir: a restart would start from scratch. Pass one."
# The value of the program's --checkpoint-dir (either spelling: "--checkpoint-dir D" or "--checkpoint-dir=D").
ckpt_dir=""
for ((i = 0; i < ${#program[@]}; i++)); do
  case "${program[$i]}" in
    --checkpoint-dir) ckpt_dir="${program[$((i + 1))]:-}" ;;
    --checkpoint-dir=*) ckpt_dir="${program[$i]#--checkpoint-dir=}" ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The status this attempt recorded in the folder's run_status.json, or "" (none written since $1, a marker file).
recorded_status() {
  local f="$ckpt_dir/run_status.json"
  [ -n "$ckpt_dir" ] && [ -f "$f" ] && [ "$f" -nt "$1" ] || return 0
  grep -q '"state": "running"' "$f" && return 0  # no end recorded: the launcher's status is all there is
  python3 "$here/run_status.py" "$ckpt_dir" > /dev/null 2>&1
  echo $?
}
if [ -z "$log_dir" ]; then log_dir=$(mktemp -d "${TMPDIR:-/tmp}/elastic.XXXXXX"); fi
mkdir -p "$log_dir" || die "cannot create --log-dir '$log_dir'"

# ---- hosts (--hostfile) ----
hosts=() slots=()
if [ -n "$hostfile" ]; then
  while read -r line; do
    line="${line%%#*}"; line="${line// /}"
    [ -n "$line" ] || continue
    hosts+=("${line%%:*}")
    if [[ "$line" == *:* ]]; then slots+=("${line##*:}"); else slots+=(1); fi
  done < "$hostfile"
  [ ${#hosts[@]} -gt 0 ] || die "--hostfile '$hostfile' lists no hosts"
fi
is_local() { case "$1" in localhost|127.*|"$(hostname)"|"$(hostname -s)") return 0 ;; esac; return 1; }
reachable() { is_local "$1" || timeout 10 ssh -o BatchMode=yes -o ConnectTimeout=5 "$1" true >/dev/null 2>&1; }
# Keeps the hosts that answer; writes them to $log_dir/hosts.<attempt>; sets world to their slots.
pick_hosts() {
  local i keep=() keep_slots=() dropped=""
  for i in "${!hosts[@]}"; do
    if reachable "${hosts[$i]}"; then keep+=("${hosts[$i]}"); keep_slots+=("${slots[$i]}")
    else dropped+=" ${hosts[$i]}"; fi
  done
  [ -z "$dropped" ] || echo "elastic: dropping host(s) that do not answer ssh:$dropped"
  hosts=("${keep[@]+"${keep[@]}"}") slots=("${keep_slots[@]+"${keep_slots[@]}"}")
  world=0
  : > "$log_dir/hosts.$1"
  for i in "${!hosts[@]}"; do echo "${hosts[$i]}:${slots[$i]}" >> "$log_dir/hosts.$1"; world=$((world + slots[i])); done
  if [ -n "$ranks" ] && [ "$world" -gt "$ranks" ]; then world=$ranks; fi
}

# ---- the host's out-of-memory kills: the cgroup's counter, where readable ----
oom_file() {
  local line path
  while IFS= read -r line; do
    case "$line" in
      0::*) path="${line#0::}"; [ -r "/sys/fs/cgroup$path/memory.events" ] && { echo "/sys/fs/cgroup$path/memory.events"; return; } ;;
      *:memory:*) path="${line#*:memory:}"; [ -r "/sys/fs/cgroup/memory$path/memory.oom_control" ] && { echo "/sys/fs/cgroup/memory$path/memory.oom_control"; return; } ;;
    esac
  done < /proc/self/cgroup
}
oom_kills() { local f; f=$(oom_file); [ -n "$f" ] && awk '$1 == "oom_kill" { print $2 }' "$f"; }

# ---- signals: passed to mpiexec, which forwards them to every rank ----
child="" signalled=""
on_signal() {
  signalled="$1"
  echo "elastic: SIG$1 received: passing it to mpiexec (every rank saves a checkpoint and stops)"
  [ -z "$child" ] || kill -s "$1" "$child" 2>/dev/null
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal USR1' USR1

# ---- the attempts ----
attempt=1 world="${ranks:-0}" rc=1
[ -z "$hostfile" ] || pick_hosts 1
while :; do
  log="$log_dir/attempt$attempt.log"
  args=("${program[@]}")
  [ "$attempt" -eq 1 ] || has_arg --resume || args+=(--resume auto)
  launch=(mpiexec $mpiexec_args)
  [ -z "$hostfile" ] || launch+=(-f "$log_dir/hosts.$attempt")
  envs=()
  [ "$attempt" -gt 1 ] || envs=("${first_env[@]+"${first_env[@]}"}")
  echo "elastic: attempt $attempt on $world rank(s): ${launch[*]} -n $world ${args[*]}"
  oom_before=$(oom_kills)
  started=$(date +%s)
  touch "$log_dir/started.$attempt"; sleep 0.01  # run_status.json written after this is newer
  : > "$log"  # before the viewer below opens it
  # mpiexec in a session of its own: a terminal's Ctrl-C or a signal to this script's process group
  # reaches the supervisor only, which passes it on once - MPICH's mpiexec takes a second SIGINT as
  # "abort now" and would kill the ranks in the middle of their checkpoint.
  env "${envs[@]+"${envs[@]}"}" setsid "${launch[@]}" -n "$world" "${args[@]}" > "$log" 2>&1 < /dev/null &
  child=$!
  # The attempt's output, live; deaf to the signals meant for the job, so no line of it is lost.
  (trap '' TERM INT USR1; exec tail -n +1 -f --pid="$child" "$log") &
  shower=$!
  while :; do
    wait "$child"; rc=$?
    # A trapped signal interrupts wait with a status above 128 while mpiexec still runs.
    if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi
    break
  done
  wait "$shower" 2>/dev/null
  child=""
  seconds=$(( $(date +%s) - started ))
  oom_after=$(oom_kills)

  # What happened.
  preempted=no dead=0 why=""
  grep -q '^preempted: ' "$log" && preempted=yes
  recorded=$(recorded_status "$log_dir/started.$attempt")
  [ "$recorded" != 75 ] || preempted=yes
  case "$recorded" in 2|3|65) [ "$rc" -eq 0 ] || rc=$recorded ;; esac
  named=$(grep -o 'rank(s) [0-9, ]* did not reach collective' "$log" | head -1 | sed 's/rank(s) \(.*\) did not.*/\1/')
  if [ "$rc" -eq 0 ] && [ "$preempted" = no ]; then why="finished"
  elif [ "$preempted" = yes ]; then why="preempted: $(grep -m1 '^preempted: ' "$log" | sed 's/^preempted: //; s/;.*//')"
  elif [ "$rc" -eq 2 ]; then why="refused its arguments (exit 2)"
  elif [ "$rc" -eq 3 ]; then why="stopped on a non-finite value (exit 3)"
  elif [ "$rc" -eq 65 ]; then why="a data or input error (exit 65)"
  elif [ "$rc" -eq 137 ] || [ "$rc" -eq 9 ] || grep -q 'Killed (signal 9)\|EXIT CODE: 9$' "$log"; then
    dead=1
    why="a rank was killed by signal 9 (exit $rc)"
    if [ -n "$oom_before" ] && [ -n "$oom_after" ] && [ "$oom_after" -gt "$oom_before" ]; then
      why+=": the host's out-of-memory killer ended $((oom_after - oom_before)) process(es) during this attempt ($(oom_file): oom_kill $oom_before -> $oom_after); a lower --batch needs less memory"
    elif [ -n "$oom_before" ]; then
      why+=" - no out-of-memory kill in $(oom_file), so something else sent it"
    else
      why+=" - often the host's out-of-memory killer: check 'dmesg | grep -i oom' and the cgroup's memory.events; a lower --batch needs less memory"
    fi
  elif [ -n "$named" ]; then
    dead=$(echo "$named" | tr ',' '\n' | grep -c '[0-9]')
    why="rank(s) $named stopped answering (dead or hung): tandem's watchdog ended the job (exit $rc)"
  else why="failed with exit $rc"
  fi
  echo "elastic: attempt $attempt on $world rank(s), ${seconds} s: $why (log: $log)"

  # What to do.
  if [ "$rc" -eq 0 ] && [ "$preempted" = no ]; then echo "elastic: done after $attempt attempt(s)"; exit 0; fi
  if [ -n "$signalled" ]; then
    if [ "$preempted" = yes ]; then
      echo "elastic: stopping: SIG$signalled came to the supervisor itself, passing the preemption on (exit 75: requeue, then rerun with --resume auto)"
      exit 75
    fi
    echo "elastic: stopping: SIG$signalled came to the supervisor itself and the job did not report a preemption (exit $rc)"
    exit "$rc"
  fi
  case "$rc" in 2|3|65) echo "elastic: not restarting: a rerun would end the same way"; exit "$rc" ;; esac
  if [ "$attempt" -gt "$max_restarts" ]; then
    echo "elastic: giving up: $max_restarts restart(s) used (--max-restarts)"
    [ "$rc" -ne 0 ] || rc=1
    exit "$rc"
  fi
  attempt=$((attempt + 1))
  if [ -n "$hostfile" ]; then pick_hosts "$attempt"
  elif [ "$dead" -gt 0 ]; then world=$((world - dead))
  fi
  if [ "$world" -lt "$min_ranks" ]; then
    echo "elastic: giving up: $world rank(s) left, fewer than --min-ranks $min_ranks"
    [ "$rc" -ne 0 ] || rc=1
    exit "$rc"
  fi
  # A signal while deciding: nothing runs, the last checkpoint stands.
  if [ -n "$signalled" ]; then echo "elastic: stopping: SIG$signalled between attempts (exit 75)"; exit 75; fi
done
