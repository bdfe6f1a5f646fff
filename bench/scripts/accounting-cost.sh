#!/usr/bin/env bash
# accounting-cost.sh measures what accounting costs: examples/hello with and without
# accounting (BATON_ACCOUNTING), driven by wrk, in interleaved pairs of runs. It prints the
# server's CPU per request (user + system, from /proc) for each run and the median of the
# per-pair ratios with its quartiles. The server runs on CPU 0, wrk on CPU 1.
#
#   bench/scripts/accounting-cost.sh [pairs] [connections] [pipeline depth]
#
# Defaults: 15 pairs, 64 connections, depth 1 (request/response). Needs wrk and taskset
# (Debian: apt-get install wrk util-linux). Each run lasts about 6 s.
set -euo pipefail
pairs=${1:-15}
conns=${2:-64}
depth=${3:-1}
port=${PORT:-18099}
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "accounting-cost: needs wrk (apt-get install wrk)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/hello" ./examples/hello
cat > "$tmp/pipeline.lua" <<'LUA'
init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) do r[i] = wrk.format(nil, "/") end
  req = table.concat(r)
end
request = function() return req end
LUA

# run <accounting> prints the server's CPU µs per request for one run.
run() {
  if ss -ltn | grep -q ":$port "; then
    echo "accounting-cost: port $port is busy" >&2
    exit 1
  fi
  BATON_ACCOUNTING=$1 taskset -c 0 "$tmp/hello" -addr "127.0.0.1:$port" 2>/dev/null &
  local pid=$!
  sleep 0.5
  local t0 t1 out reqs
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 1 wrk -t1 -c"$conns" -d5s -s "$tmp/pipeline.lua" "http://127.0.0.1:$port/" -- "$depth")
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN {printf "%.4f\n", t * 1e6 / hz / n}'
}

echo "pairs $pairs, connections $conns, pipeline depth $depth; server CPU µs per request"
: > "$tmp/ratios"
for i in $(seq "$pairs"); do
  on=$(run true)
  off=$(run false)
  echo "pair $i: on $on  off $off"
  awk -v a="$on" -v b="$off" 'BEGIN {print a / b}' >> "$tmp/ratios"
done
sort -n "$tmp/ratios" | awk '{r[NR] = $1} END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "accounting cost: %.1f%% (median of %d pairs; quartiles %.1f%% .. %.1f%%)\n", 100 * (m - 1), NR, 100 * (r[int(NR / 4) + 1] - 1), 100 * (r[int(3 * NR / 4)] - 1)
}'
