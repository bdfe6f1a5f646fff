package servers

import (
	"net/url"
	"strconv"

	"github.com/batonrt/baton/bench/arena"
)

// The arena scenario: the shared rig's game (package arena). GET ArenaPath?room=R&slot=S
// upgrades to a WebSocket and joins room R (made at its first player, dropped when its
// last one leaves) as player S (0..3, a second join of a slot replaces the first with a
// 1000 close). Each player sends 16-byte binary inputs; each room ticks every
// arena.Period (its first tick one period after it was made), applies the inputs it
// received, steps, encodes its 120-byte state once and sends it to its players.

// ArenaPath is the arena's upgrade route.
const ArenaPath = "/arena"

// ParseArenaQuery reads room and slot from the query "room=R&slot=S"; ok is false when
// either is missing, not a number, or out of range (room 0..1e6, slot 0..3).
func ParseArenaQuery(rawQuery string) (room, slot int, ok bool) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return 0, 0, false
	}
	room, err1 := strconv.Atoi(q.Get("room"))
	slot, err2 := strconv.Atoi(q.Get("slot"))
	if err1 != nil || err2 != nil || room < 0 || room > 1_000_000 || slot < 0 || slot >= arena.Players {
		return 0, 0, false
	}
	return room, slot, true
}
