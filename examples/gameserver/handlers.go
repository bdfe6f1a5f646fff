package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"html"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/ratelimit"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
)

//go:embed index.html
var indexHTML []byte

// clientJS is the browser client of the client protocol (docs/client-protocol.md), which
// the page imports in cluster mode and any page may: GET /baton.mjs.
//
//go:embed baton.mjs
var clientJS []byte

// adminPlaceholder in index.html is replaced with the admin address (host:port, or
// empty where there is none), so that the page's dashboard link points at it.
const adminPlaceholder = "{{BATON_ADMIN}}"

// setAdmin renders the page for the admin address (host:port, or "" for none). It is called
// once, before the server starts.
func (a *app) setAdmin(addr string) {
	a.index = bytes.ReplaceAll(indexHTML, []byte(adminPlaceholder), []byte(html.EscapeString(addr)))
}

// serveIndex answers / with the browser client.
func (a *app) serveIndex(c *loop.Ctx) {
	if a.index == nil {
		a.setAdmin("")
	}
	c.Bytes(200, "text/html; charset=utf-8", a.index)
}

// serveClient answers /baton.mjs with the browser client module.
func (a *app) serveClient(c *loop.Ctx) {
	c.SetHeader("Cache-Control", "no-cache")
	c.Bytes(200, "text/javascript; charset=utf-8", clientJS)
}

// ticketJSON is a ticket as the API shows it.
type ticketJSON struct {
	*game.Ticket
	Assignment *assignment `json:"assignment,omitempty"`
}

func (a *app) ticketView(t *game.Ticket) ticketJSON {
	v := ticketJSON{Ticket: t}
	if t.State == game.TicketAssigned {
		asg := assignmentFor(t.ID, t.Match)
		v.Assignment = &asg
	}
	return v
}

// createdJSON is a new ticket as its creator reads it: the ticket, its secret and, for a
// player id seen for the first time, the player's key. Nobody else is ever shown either.
type createdJSON struct {
	ticketJSON
	Secret    string `json:"secret"`
	PlayerKey string `json:"player_key,omitempty"`
}

// ticketSecret is a request's ticket secret: "Authorization: Bearer SECRET", or ?secret=
// (for browsers' WebSockets, which cannot set headers; the access log leaves out queries).
func ticketSecret(c *loop.Ctx) string {
	if h := c.Header("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return c.Query("secret")
}

// playerKeyOf is a request's player key: the X-Player-Key header, or ?key=.
func playerKeyOf(c *loop.Ctx) string {
	if k := c.Header("X-Player-Key"); k != "" {
		return k
	}
	return c.Query("key")
}

// refuseSecret answers a request whose ticket secret is missing (401) or wrong (403) and
// reports whether it did: ok says whether the secret matched.
func refuseSecret(c *loop.Ctx, given string, ok bool) bool {
	switch {
	case ok:
		return false
	case given == "":
		c.SetHeader("WWW-Authenticate", `Bearer realm="gameserver ticket"`)
		c.String(401, "401 Unauthorized: this needs the ticket's secret (Authorization: Bearer SECRET, or ?secret=)\n")
	default:
		c.String(403, "403 Forbidden: that is not this ticket's secret\n")
	}
	return true
}

// refuseKey answers a request whose player key check failed (401 missing, 403 wrong, 503
// the database) and reports whether it did.
func (a *app) refuseKey(c *loop.Ctx, player game.PlayerID, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, store.ErrKeyRequired):
		c.SetHeader("WWW-Authenticate", `Key realm="gameserver player"`)
		c.String(401, "401 Unauthorized: this player id is taken; its key is required (X-Player-Key: KEY, or ?key=)\n")
	case errors.Is(err, store.ErrWrongKey):
		c.String(403, "403 Forbidden: wrong key for this player id\n")
	default:
		a.log.Warn("gameserver: checking a player's key failed", "player", player, "err", err)
		c.String(503, "503 Service Unavailable: database\n")
	}
	return true
}

// refuseDraining answers 503 with a Retry-After while the server drains and reports
// whether it did.
func (a *app) refuseDraining(c *loop.Ctx) bool {
	if a.srv.Draining().Done() {
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: draining\n")
		return true
	}
	return false
}

// refuseBusy answers 503 with a Retry-After when the server drains or the queue is full
// (tickets queued and being made; own: the caller's claim, already counted) and reports
// whether it did.
func (a *app) refuseBusy(c *loop.Ctx, own int) bool {
	if a.refuseDraining(c) {
		return true
	}
	if a.mm.Queued()+len(a.claiming)-own >= a.opts.MaxQueued {
		c.SetHeader("Retry-After", strconv.Itoa(a.queueRetryAfter(c.Loop().Now())))
		c.String(503, "503 Service Unavailable: the matchmaking queue is full\n")
		return true
	}
	return false
}

// queueRetryAfter estimates, in whole seconds, when a full queue has room: the longest
// wait for a group when matches can start, else when the first running match is due to end.
func (a *app) queueRetryAfter(now time.Time) int {
	wait := a.opts.Wait
	if a.matches >= a.opts.MaxArenas {
		wait = a.opts.Match
		for _, ar := range a.arenas {
			if ar.fromTickets && !ar.ended {
				wait = min(wait, ar.started.Add(a.opts.Match).Sub(now))
			}
		}
	}
	return ratelimit.RetryAfterSeconds(wait)
}

// newTicket queues a ticket for player, answering the request itself on refusal (and
// returning nil then). In order: the queue's room (503), the player's key checked against
// the database (401/403; offloaded, the handler parks), one ticket made or queued per
// player (409), the player's rate (429), then the profile saved (a new id is claimed and
// its key issued: returned as key) and the ticket queued. Nothing is written for a refused ticket,
// and only the key's holder can rename a player. The caller has passed the address limit.
func (a *app) newTicket(c *loop.Ctx, player game.PlayerID, name string) (t *game.Ticket, key string) {
	if a.refuseBusy(c, 0) {
		return nil, ""
	}
	given := playerKeyOf(c)
	_, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, a.st.CheckKey(ctx, player, given)
	})
	if a.refuseKey(c, player, err) {
		return nil, ""
	}
	// Only now, the key checked (so nobody can hold another's claimed id busy this way):
	if a.claiming[player] {
		c.String(409, "409 Conflict: a ticket for this player is being made\n")
		return nil, ""
	}
	a.claiming[player] = true // counts in the queue's cap; keeps a second request out
	defer delete(a.claiming, player)
	if a.mm.IsQueued(player) {
		c.String(409, "409 Conflict: this player already has a queued ticket\n")
		return nil, ""
	}
	if ok, wait := a.ticketLimit.Allow(string(player), c.Loop().Now()); !ok {
		c.SetHeader("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(wait)))
		c.String(429, "429 Too Many Requests: too many tickets for this player\n")
		return nil, ""
	}
	if a.refuseBusy(c, 1) { // the drain may have begun, the queue filled, while it parked
		return nil, ""
	}
	key, err = offload.Do(c, func(ctx context.Context) (string, error) {
		return a.st.SaveProfile(ctx, player, name, given, time.Now()) // checks the key again, atomically
	})
	if a.refuseKey(c, player, err) {
		return nil, ""
	}
	// A drain that began during the write still answers 503 (the key's holder renamed
	// herself, or a new id was claimed and is swept after PlayerTTL); the queue's cap
	// cannot have been passed, as this claim was counted in it.
	if a.refuseDraining(c) {
		return nil, ""
	}
	t, err = a.mm.Enqueue(player, name, c.Loop().Now())
	if err != nil { // ErrQueued cannot happen: a.claiming kept every other ticket for player out
		c.String(500, err.Error()+"\n")
		return nil, ""
	}
	a.waits[t.ID] = loop.NewFuture[assignment](a.srv.Loop(0))
	return t, key
}

// postTicket is POST /tickets?player=ID&name=NAME, with X-Player-Key (or ?key=) once the
// id has one: queue for a match. 201 with the ticket, its secret and, for a new id, the
// player's key; 429 with Retry-After past the client address's or the player's rate; 503
// with Retry-After when the queue is full or the server drains; 401/403 without the
// player's key; 409 when the player already has a queued ticket.
func (a *app) postTicket(c *loop.Ctx) {
	player, name, ok := validPlayer(c)
	if !ok {
		return
	}
	if t, key := a.newTicket(c, player, name); t != nil {
		c.SetHeader("Location", "/tickets/"+t.ID)
		c.JSON(201, createdJSON{ticketJSON: a.ticketView(t), Secret: t.Secret, PlayerKey: key})
	}
}

// getTicket is GET /tickets/{id}?wait=SECONDS: the ticket, once assigned or after the wait
// (a long-poll parked on the ticket's Future; at most maxLongPoll).
func (a *app) getTicket(c *loop.Ctx) {
	t, ok := a.mm.Ticket(c.PathValue("id"))
	if !ok {
		c.String(404, "404 Not Found: no such ticket\n")
		return
	}
	if wait := waitParam(c); wait > 0 && t.State == game.TicketQueued { // no ?wait: answer at once
		if f := a.waits[t.ID]; f != nil {
			_, err := f.Await(c, wait)
			if errors.Is(err, errDraining) {
				c.SetHeader("Retry-After", "1")
				c.String(503, "503 Service Unavailable: draining\n")
				return
			}
		}
	}
	c.JSON(200, a.ticketView(t))
}

// deleteTicket is DELETE /tickets/{id} with the ticket's secret (Authorization: Bearer,
// or ?secret=): it cancels the queued ticket. 401/403 without it, 409 when not queued.
func (a *app) deleteTicket(c *loop.Ctx) {
	id := c.PathValue("id")
	t, ok := a.mm.Ticket(id)
	if !ok {
		c.String(404, "404 Not Found: no such ticket\n")
		return
	}
	if given := ticketSecret(c); refuseSecret(c, given, t.SecretMatches(given)) {
		return
	}
	if !a.mm.Cancel(id, c.Loop().Now()) {
		c.String(409, "409 Conflict: the ticket is not queued\n")
		return
	}
	if f := a.waits[id]; f != nil {
		f.Resolve(assignment{}, errors.New("cancelled"))
	}
	c.Bytes(204, "", nil)
}

// waitParam reads ?wait=SECONDS, capped at maxLongPoll; -1 when absent or not positive
// (answer at once: callers must not pass it to Future.Await, where d <= 0 waits unbounded).
func waitParam(c *loop.Ctx) time.Duration {
	s, err := strconv.ParseFloat(c.Query("wait"), 64)
	if err != nil || s <= 0 {
		return -1 // a poll: answer at once
	}
	return min(time.Duration(s*float64(time.Second)), maxLongPoll)
}

// wsMessage is what the server sends besides states: the ticket, the assignment, errors.
type wsMessage struct {
	Type       string       `json:"type"` // "ticket", "assigned", "error"
	Ticket     *game.Ticket `json:"ticket,omitempty"`
	Secret     string       `json:"secret,omitempty"`     // the ticket's, in "ticket" when this session made it
	PlayerKey  string       `json:"player_key,omitempty"` // in "ticket" when the player id was new
	Assignment *assignment  `json:"assignment,omitempty"`
	Player     string       `json:"player,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// serveWS is GET /ws?player=ID&name=NAME[&key=KEY], or GET /ws?ticket=ID&secret=SECRET:
// the whole session over one WebSocket. Without a ticket it queues one as POST /tickets
// does (same limits, same key check) and sends {"type":"ticket"} with the ticket's secret
// (and the player's key for a new id); with one, the ticket's secret must come with it
// (401/403 before the upgrade otherwise). It parks until the assignment and sends
// {"type":"assigned"}; then every text message the client sends is an input
// ({"dx":-1..1,"dy":-1..1,"seq":n}, at most 30 a second, the rest dropped) for the
// ticket's player and every tick it receives {"type":"state","state":{...}}. When the
// match ends the room stops, which cancels this task: the connection closes.
func (a *app) serveWS(c *loop.Ctx) {
	if c.Query("watch") != "" {
		a.watch(c)
		return
	}
	var (
		t      *game.Ticket
		player game.PlayerID
		key    string
		made   bool
	)
	if id := c.Query("ticket"); id != "" {
		var ok bool
		if t, ok = a.mm.Ticket(id); !ok {
			c.String(404, "404 Not Found: no such ticket\n")
			return
		}
		if given := ticketSecret(c); refuseSecret(c, given, t.SecretMatches(given)) {
			return
		}
		if p := c.Query("player"); p != "" && game.PlayerID(p) != t.Player {
			c.String(403, "403 Forbidden: the ticket is another player's\n")
			return
		}
		player = t.Player
	} else {
		if ok, wait := a.addrLimit.Allow(addrKey(c), c.Loop().Now()); !ok {
			c.SetHeader("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(wait)))
			c.String(429, "429 Too Many Requests\n")
			return
		}
		var name string
		var ok bool
		if player, name, ok = validPlayer(c); !ok {
			return
		}
		if t, key = a.newTicket(c, player, name); t == nil {
			return
		}
		made = true
	}
	conn, err := ws.Upgrade(c, ws.Config{})
	if err != nil {
		return // Upgrade answered
	}
	send := func(m wsMessage) error {
		b, _ := json.Marshal(m)
		return conn.WriteText(b)
	}
	hello := wsMessage{Type: "ticket", Ticket: t, Player: string(player)}
	if made {
		hello.Secret, hello.PlayerKey = t.Secret, key
	}
	if send(hello) != nil {
		return
	}
	if t.State == game.TicketQueued {
		if f := a.waits[t.ID]; f != nil {
			if _, err := f.Await(c, a.opts.TicketAge); err != nil {
				a.mm.Cancel(t.ID, c.Loop().Now()) // the client left or waited too long: not matched now
				_ = send(wsMessage{Type: "error", Error: err.Error()})
				_ = conn.Close(1013, "no match") // try again later
				return
			}
		}
	}
	if t.State == game.TicketQueued {
		a.mm.Cancel(t.ID, c.Loop().Now())
	}
	ar := a.arenas[t.Match]
	if t.State != game.TicketAssigned || ar == nil || ar.ended {
		_ = send(wsMessage{Type: "error", Error: "the match is over"})
		_ = conn.Close(1000, "match over")
		return
	}
	asg := assignmentFor(t.ID, t.Match)
	if send(wsMessage{Type: "assigned", Ticket: t, Assignment: &asg, Player: string(player)}) != nil {
		return
	}
	if ar.join(&c.Task, player, conn) != nil {
		return
	}
	defer ar.leave(player, conn)
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return // the client left, or the room stopped (the match ended)
		}
		if ok, _ := a.inputLimit.Allow(string(player), c.Loop().Now()); !ok {
			a.droppedInputs.Add(1)
			continue
		}
		in := game.Input{}
		if json.Unmarshal(data, &in) != nil {
			continue
		}
		in.Player = player
		_ = ar.room.Input(in) // a full queue drops it: the next input supersedes it
	}
}

// watch is GET /ws?watch=1: a spectator's WebSocket. It is sent {"type":"watching"} and
// then the states of the running arena with the most humans (a bot arena when none has
// any), so the page is alive before its player presses Play. When that match ends the
// connection closes (1000) and the client connects again for the next one.
func (a *app) watch(c *loop.Ctx) {
	var best *arena
	for _, ar := range a.arenas {
		if !ar.ended && (best == nil || ar.m.Humans() > best.m.Humans() || ar.m.Humans() == best.m.Humans() && ar.id < best.id) {
			best = ar
		}
	}
	if best == nil {
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: no match to watch\n")
		return
	}
	conn, err := ws.Upgrade(c, ws.Config{})
	if err != nil {
		return
	}
	b, _ := json.Marshal(wsMessage{Type: "watching", Assignment: &assignment{Match: best.id}})
	key := game.PlayerID("watch-" + strconv.FormatUint(conn.ID(), 10)) // never a player: Leave ignores it
	if conn.WriteText(b) != nil || best.join(&c.Task, key, conn) != nil {
		return
	}
	defer best.leave(key, conn)
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return // the spectator left, or the match ended
		}
	}
}

// roomState is GET /rooms/{id}/state?since=N&wait=S: the long-poll fallback. It answers
// the latest snapshot at once if its seq is past since, or when the next one is taken
// (or the wait ends: then the same snapshot again). A finished match keeps answering
// its final state for a while; then 404.
func (a *app) roomState(c *loop.Ctx) {
	ar := a.arenas[c.PathValue("id")]
	if ar == nil {
		c.String(404, "404 Not Found: no such room\n")
		return
	}
	since, _ := strconv.ParseUint(c.Query("since"), 10, 64)
	if !ar.ended && ar.m.Tick() <= since {
		wait := waitParam(c)
		if wait <= 0 {
			wait = 10 * time.Second
		}
		_ = ar.changed.Wait(c, wait) // the room publishes at 20 Hz
	}
	c.Bytes(200, "application/json", ar.snap)
}

// postInput is POST /rooms/{id}/input?player=ID with {"dx":..,"dy":..,"seq":..} and the
// player's ticket secret (Authorization: Bearer, or ?secret=): an input without WebSocket.
// 401/403 without the secret of that player's ticket; 429 with Retry-After past 30 a
// second per player. 202 once queued.
func (a *app) postInput(c *loop.Ctx) {
	player, _, ok := validPlayer(c)
	if !ok {
		return
	}
	ar := a.arenas[c.PathValue("id")]
	if ar == nil || ar.m.Player(player) == nil {
		c.String(404, "404 Not Found: no such room, or the player is not in it\n")
		return
	}
	seat, given := ar.seats[player], ticketSecret(c)
	if refuseSecret(c, given, seat != nil && seat.SecretMatches(given)) {
		return
	}
	if ok, wait := a.inputLimit.Allow(string(player), c.Loop().Now()); !ok {
		c.SetHeader("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(wait)))
		c.String(429, "429 Too Many Requests\n")
		return
	}
	in := game.Input{}
	if err := json.Unmarshal(c.Body(), &in); err != nil {
		c.String(400, "400 Bad Request: "+err.Error()+"\n")
		return
	}
	in.Player = player
	if err := ar.room.Input(in); err != nil && !errors.Is(err, room.ErrInputDropped) {
		if !room.Error(c, err) {
			c.String(500, err.Error()+"\n")
		}
		return
	}
	c.String(202, "queued\n")
}

// leaderboard is GET /leaderboard?n=10&bots=1: the top players from the database.
func (a *app) leaderboard(c *loop.Ctx) {
	n, err := strconv.Atoi(c.Query("n"))
	if err != nil || n <= 0 || n > 100 {
		n = 10
	}
	bots := c.Query("bots") == "1" || c.Query("bots") == "true"
	lb, err := offload.Do(c, func(ctx context.Context) ([]store.Entry, error) {
		return a.st.Leaderboard(ctx, n, bots)
	})
	if err != nil {
		c.String(503, "503 Service Unavailable: "+err.Error()+"\n")
		return
	}
	c.JSON(200, lb)
}

// profile is GET /players/{id}.
func (a *app) profile(c *loop.Ctx) {
	id := game.PlayerID(c.PathValue("id"))
	type answer struct {
		p  store.Profile
		ok bool
	}
	got, err := offload.Do(c, func(ctx context.Context) (answer, error) {
		p, ok, err := a.st.Profile(ctx, id)
		return answer{p, ok}, err
	})
	switch {
	case err != nil:
		c.String(503, "503 Service Unavailable: "+err.Error()+"\n")
	case !got.ok:
		c.String(404, "404 Not Found: no such player\n")
	default:
		c.JSON(200, got.p)
	}
}

// roomJSON is a line of GET /rooms.
type roomJSON struct {
	ID      string `json:"id"`
	Players int    `json:"players"`
	Humans  int    `json:"humans"`
	Tick    uint64 `json:"tick"`
	Ended   bool   `json:"ended"`
	Heavy   bool   `json:"heavy,omitempty"`
}

// listRooms is GET /rooms: the arenas, running first, and the database writer's last
// batches (db_batches: when each was handed to the offload pool and how long its write took).
func (a *app) listRooms(c *loop.Ctx) {
	out := []roomJSON{}
	for _, ar := range a.arenas {
		out = append(out, roomJSON{ID: ar.id, Players: len(ar.m.Players()), Humans: ar.m.Humans(),
			Tick: ar.m.Tick(), Ended: ar.ended, Heavy: ar.heavy})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ended != out[j].Ended {
			return !out[i].Ended
		}
		return out[i].ID < out[j].ID
	})
	batches := append([]dbBatch{}, a.dbBatches...)
	c.JSON(200, map[string]any{"rooms": out, "queued": a.mm.Queued(), "recorded": a.recorded.Load(),
		"dropped_inputs": a.droppedInputs.Load(), "db_batches": batches})
}
