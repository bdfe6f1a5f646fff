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
	"time"

	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/ratelimit"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/offload"
)

//go:embed index.html
var indexHTML []byte

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

// newTicket saves the player's profile (offloaded: the handler parks, the loop goes on)
// and queues a ticket with a Future its waiters park on. It answers the request itself
// on failure and returns nil then.
func (a *app) newTicket(c *loop.Ctx, player game.PlayerID, name string) *game.Ticket {
	if a.srv.Draining().IsSet() {
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: draining\n")
		return nil
	}
	_, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, a.st.SaveProfile(ctx, player, name, false, time.Now())
	})
	if err != nil {
		a.log.Warn("gameserver: saving a profile failed", "player", player, "err", err)
		c.String(503, "503 Service Unavailable: database\n")
		return nil
	}
	if a.srv.Draining().IsSet() { // the drain began while the profile was written
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: draining\n")
		return nil
	}
	t, err := a.mm.Enqueue(player, name, c.Now())
	if errors.Is(err, game.ErrQueued) {
		c.String(409, "409 Conflict: this player already has a queued ticket\n")
		return nil
	}
	if err != nil {
		c.String(500, err.Error()+"\n")
		return nil
	}
	a.waits[t.ID] = loop.NewFuture[assignment](a.srv)
	return t
}

// postTicket is POST /tickets?player=ID&name=NAME: queue for a match (rate-limited per
// player: 429 with Retry-After past it). 201 with the ticket.
func (a *app) postTicket(c *loop.Ctx) {
	player, name, ok := validPlayer(c)
	if !ok {
		return
	}
	if t := a.newTicket(c, player, name); t != nil {
		c.SetHeader("Location", "/tickets/"+t.ID)
		c.JSON(201, a.ticketView(t))
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
	if t.State == game.TicketQueued {
		if f := a.waits[t.ID]; f != nil {
			_, err := f.AwaitTimeout(c, waitParam(c))
			if errors.Is(err, errDraining) {
				c.SetHeader("Retry-After", "1")
				c.String(503, "503 Service Unavailable: draining\n")
				return
			}
		}
	}
	c.JSON(200, a.ticketView(t))
}

// deleteTicket cancels a queued ticket.
func (a *app) deleteTicket(c *loop.Ctx) {
	id := c.PathValue("id")
	if !a.mm.Cancel(id, c.Now()) {
		c.String(409, "409 Conflict: the ticket is not queued\n")
		return
	}
	if f := a.waits[id]; f != nil {
		f.Resolve(assignment{}, errors.New("cancelled"))
	}
	c.NoContent()
}

// waitParam reads ?wait=SECONDS (default 0: answer at once), capped at maxLongPoll.
func waitParam(c *loop.Ctx) time.Duration {
	s, err := strconv.ParseFloat(c.Query("wait"), 64)
	if err != nil || s <= 0 {
		return -1 // a poll: AwaitTimeout answers at once
	}
	return min(time.Duration(s*float64(time.Second)), maxLongPoll)
}

// wsMessage is what the server sends besides states: the ticket, the assignment, errors.
type wsMessage struct {
	Type       string       `json:"type"` // "ticket", "assigned", "error"
	Ticket     *game.Ticket `json:"ticket,omitempty"`
	Assignment *assignment  `json:"assignment,omitempty"`
	Player     string       `json:"player,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// serveWS is GET /ws?player=ID&name=NAME[&ticket=ID]: the whole session over one
// WebSocket. Without a ticket it queues one (rate-limited like POST /tickets); it sends
// {"type":"ticket"}, parks until the assignment and sends {"type":"assigned"}; then every
// text message the client sends is an input ({"dx":-1..1,"dy":-1..1,"seq":n}, at most 30
// a second, the rest dropped) and every tick it receives {"type":"state","state":{...}}.
// When the match ends the room stops, which cancels this task: the connection closes.
func (a *app) serveWS(c *loop.Ctx) {
	if c.Query("watch") != "" {
		a.watch(c)
		return
	}
	player, name, ok := validPlayer(c)
	if !ok {
		return
	}
	var t *game.Ticket
	if id := c.Query("ticket"); id != "" {
		if t, ok = a.mm.Ticket(id); !ok || t.Player != player {
			c.String(404, "404 Not Found: no such ticket for this player\n")
			return
		}
	} else {
		if ok, wait := a.ticketLimit.Allow(string(player), c.Now()); !ok {
			c.SetHeader("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(wait)))
			c.String(429, "429 Too Many Requests\n")
			return
		}
		if t = a.newTicket(c, player, name); t == nil {
			return
		}
	}
	ws, err := c.Upgrade(loop.UpgradeOptions{})
	if err != nil {
		return // Upgrade answered
	}
	send := func(m wsMessage) error {
		b, _ := json.Marshal(m)
		return ws.WriteText(b)
	}
	if send(wsMessage{Type: "ticket", Ticket: t, Player: string(player)}) != nil {
		return
	}
	if t.State == game.TicketQueued {
		if f := a.waits[t.ID]; f != nil {
			if _, err := f.AwaitTimeout(c, maxTicketAge); err != nil {
				a.mm.Cancel(t.ID, c.Now()) // the client left or waited too long: not matched now
				_ = send(wsMessage{Type: "error", Error: err.Error()})
				_ = ws.Close(1013, "no match") // try again later
				return
			}
		}
	}
	if t.State == game.TicketQueued {
		a.mm.Cancel(t.ID, c.Now())
	}
	ar := a.arenas[t.Match]
	if t.State != game.TicketAssigned || ar == nil || ar.ended {
		_ = send(wsMessage{Type: "error", Error: "the match is over"})
		_ = ws.Close(1000, "match over")
		return
	}
	asg := assignmentFor(t.ID, t.Match)
	if send(wsMessage{Type: "assigned", Ticket: t, Assignment: &asg, Player: string(player)}) != nil {
		return
	}
	if ar.room.Attach(&c.Task) != nil {
		return
	}
	ar.addConn(player, ws)
	defer ar.removeConn(player, ws)
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return // the client left, or the room stopped (the match ended)
		}
		if ok, _ := a.inputLimit.Allow(string(player), c.Now()); !ok {
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
	ws, err := c.Upgrade(loop.UpgradeOptions{})
	if err != nil {
		return
	}
	b, _ := json.Marshal(wsMessage{Type: "watching", Assignment: &assignment{Match: best.id}})
	if ws.WriteText(b) != nil || best.room.Attach(&c.Task) != nil {
		return
	}
	key := game.PlayerID("watch-" + strconv.FormatUint(ws.ID(), 10)) // never a player: Leave ignores it
	best.addConn(key, ws)
	defer best.removeConn(key, ws)
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
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
		_ = ar.changed.WaitTimeout(c, wait) // the room publishes at 20 Hz
	}
	c.Bytes(200, "application/json", ar.snap)
}

// postInput is POST /rooms/{id}/input?player=ID with {"dx":..,"dy":..,"seq":..}: an input
// without WebSocket (rate-limited per player: 429 with Retry-After). 202 once queued.
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
