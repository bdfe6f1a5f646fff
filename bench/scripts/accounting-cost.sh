#!/usr/bin/env bash
# accounting-cost.sh measures what accounting costs end to end: examples/hello with and
# without accounting (BATON_ACCOUNTING), driven by wrk, in interleaved rounds. Both servers
# run at once on CPU 0; each round drives one, then the other, for a short burst from wrk
# on CPU 1 (the order alternates), and takes each server's CPU time per request over its
# burst. Drift in the machine's speed, which is most of the
# noise on a shared VM, then hits both alike. Every few rounds both servers are replaced
# by fresh processes, so that one process's luck (memory layout, which threads share the
# core) does not decide the result. It prints each round and the median of the per-round
# on/off ratios with its quartiles.
#
#   bench/scripts/accounting-cost.sh [rounds] [connections] [pipeline depth]
#
# Defaults: 30 rounds, 64 connections, depth 1 (request/response). Environment: BURST
# (seconds per burst, default 2), ROUNDS_PER_PROCESS (default 6), PORT (default 18099;
# PORT+1 is used too). Needs wrk and taskset (Debian: apt-get install wrk util-linux).
set -euo pipefail
rounds=${1:-30}
conns=${2:-64}
depth=${3:-1}
burst=${BURST:-2}
per=${ROUNDS_PER_PROCESS:-6}
port=${PORT:-18099}
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "accounting-cost: needs wrk (apt-get install wrk)" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
# stop kills the servers and waits until they are gone (they are not this shell's
# children, so wait cannot).
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
  done
  pids=()
}
cleanup() {
  stop
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/hello" ./examples/hello
cat > "$tmp/pipeline.lua" <<'LUA'
init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) do r[i] = wrk.format(nil, "/") end
  req = table.concat(r)
end
request = function() return req end
LUA

# start <accounting> <port> starts a server and prints its pid.
start() {
  if ss -ltn | grep -q ":$2 "; then
    echo "accounting-cost: port $2 is busy" >&2
    exit 1
  fi
  BATON_ACCOUNTING=$1 taskset -c 0 "$tmp/hello" -addr "127.0.0.1:$2" >/dev/null 2>&1 &
  echo $!
}

# cpu <pid> prints the process's CPU time so far in nanoseconds, summed over its threads
# (schedstat counts in nanoseconds; /proc/<pid>/stat only in clock ticks of 10 ms).
cpu() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }

# burst <pid> <port> drives one server for one burst and prints its CPU µs per request.
burst() {
  local t0 t1 out reqs
  t0=$(cpu "$1")
  out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${burst}s" -s "$tmp/pipeline.lua" "http://127.0.0.1:$2/" -- "$depth")
  t1=$(cpu "$1")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v t="$((t1 - t0))" -v n="$reqs" 'BEGIN {printf "%.4f\n", t / 1e3 / n}'
}

echo "rounds $rounds ($per per process pair, bursts of ${burst}s), connections $conns, pipeline depth $depth; server CPU µs per request"
: > "$tmp/ratios"
for i in $(seq 0 $((rounds - 1))); do
  if ((i % per == 0)); then
    stop
    pon=$(start true "$port")
    poff=$(start false "$((port + 1))")
    pids=("$pon" "$poff")
    sleep 0.5
    burst "$pon" "$port" >/dev/null # warm both up
    burst "$poff" "$((port + 1))" >/dev/null
  fi
  if ((i % 2 == 0)); then
    on=$(burst "$pon" "$port")
    off=$(burst "$poff" "$((port + 1))")
  else
    off=$(burst "$poff" "$((port + 1))")
    on=$(burst "$pon" "$port")
  fi
  echo "round $((i + 1)): on $on  off $off"
  awk -v a="$on" -v b="$off" 'BEGIN {print a / b}' >> "$tmp/ratios"
done
sort -n "$tmp/ratios" | awk '{r[NR] = $1} END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "accounting cost: %.1f%% (median of %d rounds; quartiles %.1f%% .. %.1f%%)\n", 100 * (m - 1), NR, 100 * (r[int(NR / 4) + 1] - 1), 100 * (r[int(3 * NR / 4)] - 1)
}'
