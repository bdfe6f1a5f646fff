#!/bin/sh
# cluster.sh: the flagship as a cluster on one machine (docs/cluster.md, "The flagship as a
# cluster"): one etcd and three game nodes on loopback, started by `make cluster`. Ctrl-C
# stops them all. Everything lives under $CLUSTER_DATA (etcd's data, each node's database,
# the logs). The seat key is a development key: set GAMESERVER_SEAT_KEY (32 bytes or
# more, the same on every node) anywhere else.
set -eu
CLUSTER_DATA=${CLUSTER_DATA:-data/cluster}
ETCD=${ETCD:-etcd}
ETCD_ADDR=${ETCD_ADDR:-127.0.0.1:2479}
ETCD_PEER=${ETCD_PEER:-127.0.0.1:2480}
NODES=${NODES:-127.0.0.1:8091 127.0.0.1:8092 127.0.0.1:8093}
GO=${GO:-go}
export GAMESERVER_SEAT_KEY="${GAMESERVER_SEAT_KEY:-make-cluster-development-seat-key-0123456789}"

command -v "$ETCD" >/dev/null 2>&1 || { echo "make cluster: no etcd ($ETCD) on PATH: install it (Debian: apt-get install etcd-server) or set ETCD=/path/to/etcd" >&2; exit 1; }
mkdir -p "$CLUSTER_DATA"
echo "make cluster: building the game server (the first build compiles SQLite: minutes)"
$GO build -o "$CLUSTER_DATA/gameserver" .

pids=""
stop() {
	trap - EXIT INT TERM
	[ -n "$pids" ] && kill $pids 2>/dev/null || true
	wait 2>/dev/null || true
}
trap stop EXIT INT TERM

"$ETCD" --name cluster --data-dir "$CLUSTER_DATA/etcd" \
	--listen-client-urls "http://$ETCD_ADDR" --advertise-client-urls "http://$ETCD_ADDR" \
	--listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
	--initial-cluster "cluster=http://$ETCD_PEER" \
	--auto-compaction-mode=periodic --auto-compaction-retention=1h >"$CLUSTER_DATA/etcd.log" 2>&1 &
pids="$!"
sleep 1 # the nodes retry until etcd answers; this only catches an etcd that cannot start
kill -0 "$pids" 2>/dev/null || { echo "make cluster: etcd did not start; see $CLUSTER_DATA/etcd.log" >&2; exit 1; }
echo "make cluster: etcd at http://$ETCD_ADDR (log $CLUSTER_DATA/etcd.log)"

n=0
for addr in $NODES; do
	n=$((n + 1))
	port=${addr##*:}
	"$CLUSTER_DATA/gameserver" -addr "$addr" -admin "${addr%:*}:$((port + 100))" -data "$CLUSTER_DATA/game-$n" \
		-etcd "http://$ETCD_ADDR" -node "game-$n" >"$CLUSTER_DATA/game-$n.log" 2>&1 &
	pids="$pids $!"
	echo "make cluster: game-$n at http://$addr/ (admin http://${addr%:*}:$((port + 100))/debug/baton/cluster, log $CLUSTER_DATA/game-$n.log)"
done
echo "make cluster: $n nodes; play a room through any of them: http://$(echo "$NODES" | cut -d' ' -f1)/?room=lobby (or ?room=lobby on another node: the same room). Ctrl-C stops all."
wait
