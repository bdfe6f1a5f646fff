package game

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
)

// TicketState is where a matchmaking ticket stands.
type TicketState string

// The states of a ticket: queued until a group forms, then assigned (or cancelled).
const (
	TicketQueued    TicketState = "queued"
	TicketAssigned  TicketState = "assigned"
	TicketCancelled TicketState = "cancelled"
)

// Ticket is one player's request for a match. Its ID is random (not a counter, so that
// one ticket's id says nothing about another's) and its Secret, also random, is what
// proves a client created it: the server hands it to the creator only, and asks for it
// before it lets anyone cancel the ticket, play on it or send its player's inputs.
type Ticket struct {
	ID      string      `json:"id"`
	Secret  string      `json:"-"` // never in a ticket's JSON: see the server's creator-only answers
	Player  PlayerID    `json:"player"`
	Name    string      `json:"name"`
	Created time.Time   `json:"created"`
	State   TicketState `json:"state"`
	Updated time.Time   `json:"updated"`         // when it was queued, assigned or cancelled
	Match   string      `json:"match,omitempty"` // set once assigned
}

// MatchmakerConfig says how tickets become matches.
type MatchmakerConfig struct {
	// Size is how many players a match takes; a full group starts at once. Default 4.
	Size int
	// MaxWait is how long the oldest ticket waits for a full group; then its group starts
	// with whoever is queued (at least MinPlayers), bots filling the rest when
	// FillWithBots. Default 3 s.
	MaxWait time.Duration
	// MinPlayers is the smallest group MaxWait may start. Default 1.
	MinPlayers int
	// FillWithBots adds bots to a group that starts short.
	FillWithBots bool
	// Keep is how long an assigned or cancelled ticket stays readable. Default 2 min.
	Keep time.Duration
}

// Validate names the first field that cannot work; zero fields take their defaults.
func (c MatchmakerConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Size < 1:
		return fmt.Errorf("game: MatchmakerConfig.Size (%d) must be at least 1", c.Size)
	case c.MinPlayers < 1 || c.MinPlayers > c.Size:
		return fmt.Errorf("game: MatchmakerConfig.MinPlayers (%d) must be between 1 and Size (%d)", c.MinPlayers, c.Size)
	case c.MaxWait < 0:
		return fmt.Errorf("game: MatchmakerConfig.MaxWait (%v) must not be negative", c.MaxWait)
	case c.Keep < 0:
		return fmt.Errorf("game: MatchmakerConfig.Keep (%v) must not be negative", c.Keep)
	}
	return nil
}

func (c MatchmakerConfig) withDefaults() MatchmakerConfig {
	if c.Size == 0 {
		c.Size = 4
	}
	if c.MaxWait == 0 {
		c.MaxWait = 3 * time.Second
	}
	if c.MinPlayers == 0 {
		c.MinPlayers = 1
	}
	if c.Keep == 0 {
		c.Keep = 2 * time.Minute
	}
	return c
}

// Group is a set of queued tickets that Form chose to start one match, and how many bots
// should join them.
type Group struct {
	Tickets []*Ticket
	Bots    int
}

// ErrQueued is returned by Enqueue for a player who already holds a queued ticket.
var ErrQueued = errors.New("game: player already queued")

// Matchmaker turns tickets into groups, oldest first. Confined to one goroutine (the
// server's loop); time comes from the caller.
type Matchmaker struct {
	cfg     MatchmakerConfig
	queue   []*Ticket // queued, oldest first
	tickets map[string]*Ticket
	byUser  map[PlayerID]*Ticket // the player's queued ticket
	done    []*Ticket            // assigned or cancelled, in that order, for Forget
}

// TicketIDBytes and TicketSecretBytes are the random bytes in a ticket's ID and Secret:
// 96 bits make an id nobody guesses among the tickets alive, 256 bits a credential.
const (
	TicketIDBytes     = 12
	TicketSecretBytes = 32
)

// newTicketID returns "t" and TicketIDBytes random bytes in hex.
func newTicketID() string {
	b := make([]byte, TicketIDBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return "t" + hex.EncodeToString(b)
}

// NewSecret returns TicketSecretBytes random bytes, base64url without padding (43
// characters): a ticket's Secret, also used by the server for player keys.
func NewSecret() string {
	b := make([]byte, TicketSecretBytes)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// SecretMatches reports, in constant time, whether got is the ticket's Secret (an empty
// got never matches).
func (t *Ticket) SecretMatches(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(t.Secret)) == 1
}

// NewMatchmaker returns an empty matchmaker.
func NewMatchmaker(cfg MatchmakerConfig) (*Matchmaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Matchmaker{cfg: cfg.withDefaults(), tickets: map[string]*Ticket{}, byUser: map[PlayerID]*Ticket{}}, nil
}

// Config returns the configuration in force (defaults filled in).
func (mm *Matchmaker) Config() MatchmakerConfig { return mm.cfg }

// Enqueue queues a ticket for player at now.
func (mm *Matchmaker) Enqueue(player PlayerID, name string, now time.Time) (*Ticket, error) {
	if _, ok := mm.byUser[player]; ok {
		return nil, ErrQueued
	}
	t := &Ticket{ID: newTicketID(), Secret: NewSecret(), Player: player, Name: name, Created: now, Updated: now, State: TicketQueued}
	mm.queue = append(mm.queue, t)
	mm.tickets[t.ID] = t
	mm.byUser[player] = t
	return t, nil
}

// Ticket returns a ticket by id, queued or recently done.
func (mm *Matchmaker) Ticket(id string) (*Ticket, bool) {
	t, ok := mm.tickets[id]
	return t, ok
}

// IsQueued reports whether player holds a queued ticket.
func (mm *Matchmaker) IsQueued(player PlayerID) bool {
	_, ok := mm.byUser[player]
	return ok
}

// QueuedPlayers returns the players holding a queued ticket, oldest first.
func (mm *Matchmaker) QueuedPlayers() []PlayerID {
	ids := make([]PlayerID, len(mm.queue))
	for i, t := range mm.queue {
		ids[i] = t.Player
	}
	return ids
}

// Queued returns how many tickets wait.
func (mm *Matchmaker) Queued() int { return len(mm.queue) }

// Cancel withdraws a queued ticket, reporting whether it was queued.
func (mm *Matchmaker) Cancel(id string, now time.Time) bool {
	t, ok := mm.tickets[id]
	if !ok || t.State != TicketQueued {
		return false
	}
	for i, q := range mm.queue {
		if q == t {
			mm.queue = append(mm.queue[:i], mm.queue[i+1:]...)
			break
		}
	}
	mm.finish(t, TicketCancelled, "", now)
	return true
}

// Form takes groups out of the queue: every full group, then one short group if the
// oldest ticket has waited MaxWait. The caller starts a match per group and must call
// Assign for it: until then its tickets read as queued but are no longer in the queue.
func (mm *Matchmaker) Form(now time.Time) []Group { return mm.FormAtMost(now, math.MaxInt) }

// FormAtMost is Form taking at most n groups (n <= 0: none), for a server that caps its
// matches: the rest stay queued, oldest first.
func (mm *Matchmaker) FormAtMost(now time.Time, n int) []Group {
	var groups []Group
	for len(mm.queue) >= mm.cfg.Size && len(groups) < n {
		groups = append(groups, Group{Tickets: mm.take(mm.cfg.Size)})
	}
	if q := len(mm.queue); len(groups) < n && q >= mm.cfg.MinPlayers && q > 0 && now.Sub(mm.queue[0].Created) >= mm.cfg.MaxWait {
		g := Group{Tickets: mm.take(q)}
		if mm.cfg.FillWithBots {
			g.Bots = mm.cfg.Size - q
		}
		groups = append(groups, g)
	}
	return groups
}

// Expire cancels the queued tickets created more than age before now and returns them
// (nil when none): a ticket nobody came back for does not hold its place for ever.
func (mm *Matchmaker) Expire(now time.Time, age time.Duration) []*Ticket {
	var gone []*Ticket
	for len(mm.queue) > 0 && now.Sub(mm.queue[0].Created) > age {
		t := mm.queue[0]
		mm.queue = mm.queue[1:]
		mm.finish(t, TicketCancelled, "", now)
		gone = append(gone, t)
	}
	return gone
}

func (mm *Matchmaker) take(n int) []*Ticket {
	g := append([]*Ticket(nil), mm.queue[:n]...)
	mm.queue = append(mm.queue[:0], mm.queue[n:]...)
	for _, t := range g {
		delete(mm.byUser, t.Player)
	}
	return g
}

// Assign records that a group's tickets play in match.
func (mm *Matchmaker) Assign(g Group, match string, now time.Time) {
	for _, t := range g.Tickets {
		mm.finish(t, TicketAssigned, match, now)
	}
}

func (mm *Matchmaker) finish(t *Ticket, s TicketState, match string, now time.Time) {
	t.State, t.Match, t.Updated = s, match, now
	delete(mm.byUser, t.Player)
	mm.done = append(mm.done, t)
}

// Forget drops assigned and cancelled tickets older than Keep, bounding memory. It
// returns the ids it dropped (nil when none).
func (mm *Matchmaker) Forget(now time.Time) []string {
	var ids []string
	n := 0
	for n < len(mm.done) && now.Sub(mm.done[n].Updated) >= mm.cfg.Keep {
		delete(mm.tickets, mm.done[n].ID)
		ids = append(ids, mm.done[n].ID)
		n++
	}
	mm.done = append(mm.done[:0], mm.done[n:]...)
	return ids
}
