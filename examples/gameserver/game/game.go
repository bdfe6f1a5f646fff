// Package game is the game of examples/gameserver as plain Go, with no server in sight:
// arenas where players steer toward orbs (one point per orb), matchmaking tickets that
// become matches, and matches that end on time or on score with a result to persist.
//
// Nothing here locks: every value belongs to one goroutine at a time. The server keeps
// them on its loop (a match is a room's state, the matchmaker is shared by the handlers
// and one background task), and the tests drive them directly with made-up clocks.
package game

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// PlayerID names a player across matches: the leaderboard's key.
type PlayerID string

// Config shapes an arena and says when its match ends.
type Config struct {
	Width, Height float64       // arena size in units; default 800 x 600
	MaxPlayers    int           // players per arena, bots included; default 8
	Speed         float64       // units per second at full input; default 220
	Radius        float64       // a player's radius; default 14
	OrbRadius     float64       // an orb's radius; default 7
	Orbs          int           // orbs on the field at once; default 6
	Duration      time.Duration // the match ends after this much play; default 60 s
	ScoreLimit    int           // the match ends when a player reaches it; default 25, 0 means none
}

// DefaultConfig returns the demo's arena: 8 players, 60 s, first to 25.
func DefaultConfig() Config {
	return Config{Width: 800, Height: 600, MaxPlayers: 8, Speed: 220, Radius: 14, OrbRadius: 7, Orbs: 6,
		Duration: 60 * time.Second, ScoreLimit: 25}
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Width <= 0 || c.Height <= 0:
		return fmt.Errorf("game: Config.Width and Config.Height (%v x %v) must be positive", c.Width, c.Height)
	case c.MaxPlayers < 1:
		return fmt.Errorf("game: Config.MaxPlayers (%d) must be at least 1", c.MaxPlayers)
	case c.Speed <= 0:
		return fmt.Errorf("game: Config.Speed (%v) must be positive", c.Speed)
	case c.Radius <= 0 || c.OrbRadius <= 0:
		return fmt.Errorf("game: Config.Radius (%v) and Config.OrbRadius (%v) must be positive", c.Radius, c.OrbRadius)
	case 2*c.Radius >= c.Width || 2*c.Radius >= c.Height:
		return fmt.Errorf("game: Config.Radius (%v) must leave room to move in %v x %v", c.Radius, c.Width, c.Height)
	case c.Orbs < 1:
		return fmt.Errorf("game: Config.Orbs (%d) must be at least 1", c.Orbs)
	case c.Duration <= 0:
		return fmt.Errorf("game: Config.Duration (%v) must be positive", c.Duration)
	case c.ScoreLimit < 0:
		return fmt.Errorf("game: Config.ScoreLimit (%d) must not be negative", c.ScoreLimit)
	}
	return nil
}

// Input is one player's steering: a direction whose components are clamped to [-1, 1]
// (a longer vector is scaled to length 1). Seq lets a client match snapshots to its
// inputs: the snapshot reports the last Seq applied per player.
type Input struct {
	Player PlayerID `json:"player,omitempty"` // set by the server, never taken from the client (handlers overwrite it)
	DX     float64  `json:"dx"`
	DY     float64  `json:"dy"`
	Seq    uint32   `json:"seq"`
}

// Player is one participant of a match.
type Player struct {
	ID      PlayerID
	Name    string
	Bot     bool
	X, Y    float64 // centre
	DX, DY  float64 // current steering, length at most 1
	Score   int
	Left    bool   // disconnected; keeps its score, no longer moves
	LastSeq uint32 // Seq of the last input applied
}

// Orb is a point on the field; touching it scores one and moves it elsewhere.
type Orb struct{ X, Y float64 }

// EndReason says why a match ended.
type EndReason string

// The reasons a match ends.
const (
	EndTime     EndReason = "time"     // Config.Duration of play passed
	EndScore    EndReason = "score"    // a player reached Config.ScoreLimit
	EndShutdown EndReason = "shutdown" // the server drained: the match was cut short and still counts
	EndEmpty    EndReason = "empty"    // every human left
)

// Errors of Join and Apply.
var (
	ErrFull          = errors.New("game: arena full")
	ErrOver          = errors.New("game: match over")
	ErrDuplicate     = errors.New("game: player already in the match")
	ErrUnknownPlayer = errors.New("game: player not in the match")
)

// Match is one arena's state from the first tick to its result. Confined to one
// goroutine (the server's loop).
type Match struct {
	ID      string
	cfg     Config
	rng     *rand.Rand
	src     *rand.PCG // rng's source: its state goes in the snapshot
	players []*Player
	byID    map[PlayerID]*Player
	orbs    []Orb
	elapsed time.Duration
	tick    uint64
	over    bool
	reason  EndReason
}

// NewMatch makes an empty arena. seed fixes where players start and orbs appear, so a test
// replays a match exactly.
func NewMatch(id string, cfg Config, seed uint64) (*Match, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	m := &Match{ID: id, cfg: cfg, rng: rand.New(src), src: src, byID: map[PlayerID]*Player{}}
	for range cfg.Orbs {
		m.orbs = append(m.orbs, m.randomOrb())
	}
	return m, nil
}

// Config returns the arena's configuration.
func (m *Match) Config() Config { return m.cfg }

func (m *Match) randomOrb() Orb {
	r := m.cfg.OrbRadius
	return Orb{X: r + m.rng.Float64()*(m.cfg.Width-2*r), Y: r + m.rng.Float64()*(m.cfg.Height-2*r)}
}

// Join adds a player at a random spot. A player who left may come back (same score).
func (m *Match) Join(id PlayerID, name string, bot bool) error {
	if m.over {
		return ErrOver
	}
	if p, ok := m.byID[id]; ok {
		if p.Left {
			p.Left = false
			return nil
		}
		return ErrDuplicate
	}
	if len(m.players) >= m.cfg.MaxPlayers {
		return ErrFull
	}
	r := m.cfg.Radius
	p := &Player{ID: id, Name: name, Bot: bot,
		X: r + m.rng.Float64()*(m.cfg.Width-2*r), Y: r + m.rng.Float64()*(m.cfg.Height-2*r)}
	m.players = append(m.players, p)
	m.byID[id] = p
	return nil
}

// Leave marks a player gone: it stops moving and keeps its score for the result. When no
// human is left the match ends (EndEmpty) at the next Step.
func (m *Match) Leave(id PlayerID) {
	if p, ok := m.byID[id]; ok {
		p.Left = true
		p.DX, p.DY = 0, 0
	}
}

// Player returns a participant, or nil.
func (m *Match) Player(id PlayerID) *Player { return m.byID[id] }

// Players returns the participants in join order. The slice is the match's own: do not
// change it.
func (m *Match) Players() []*Player { return m.players }

// Humans counts the players who are not bots and have not left.
func (m *Match) Humans() int {
	n := 0
	for _, p := range m.players {
		if !p.Bot && !p.Left {
			n++
		}
	}
	return n
}

// Apply sets a player's steering until its next input. NaN components count as 0.
func (m *Match) Apply(in Input) error {
	if m.over {
		return ErrOver
	}
	p, ok := m.byID[in.Player]
	if !ok || p.Left {
		return ErrUnknownPlayer
	}
	dx, dy := clamp(in.DX), clamp(in.DY)
	if l := math.Hypot(dx, dy); l > 1 {
		dx, dy = dx/l, dy/l
	}
	p.DX, p.DY, p.LastSeq = dx, dy, in.Seq
	return nil
}

func clamp(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return math.Max(-1, math.Min(1, v))
}

// Step advances the match by dt: players move (walls stop them), touched orbs score and
// move, and the match ends when its time is up, a player reaches the score limit, or
// every human has left (a match that had humans). It reports whether the match is over.
func (m *Match) Step(dt time.Duration) bool {
	if m.over {
		return true
	}
	m.tick++
	if remaining := m.cfg.Duration - m.elapsed; dt > remaining {
		dt = remaining
	}
	m.elapsed += dt
	sec := dt.Seconds()
	r := m.cfg.Radius
	reach := r + m.cfg.OrbRadius
	hadHumans := false
	for _, p := range m.players {
		if !p.Bot {
			hadHumans = true
		}
		if p.Left {
			continue
		}
		p.X = math.Max(r, math.Min(m.cfg.Width-r, p.X+p.DX*m.cfg.Speed*sec))
		p.Y = math.Max(r, math.Min(m.cfg.Height-r, p.Y+p.DY*m.cfg.Speed*sec))
		for i := range m.orbs {
			o := &m.orbs[i]
			if math.Hypot(p.X-o.X, p.Y-o.Y) <= reach {
				p.Score++
				*o = m.randomOrb()
			}
		}
		if m.cfg.ScoreLimit > 0 && p.Score >= m.cfg.ScoreLimit && !m.over {
			m.end(EndScore)
		}
	}
	switch {
	case m.over:
	case m.elapsed >= m.cfg.Duration:
		m.end(EndTime)
	case hadHumans && m.Humans() == 0:
		m.end(EndEmpty)
	}
	return m.over
}

// End stops the match now with reason (EndShutdown when the server drains). Ending an
// ended match does nothing.
func (m *Match) End(reason EndReason) {
	if !m.over {
		m.end(reason)
	}
}

func (m *Match) end(reason EndReason) {
	m.over, m.reason = true, reason
	for _, p := range m.players {
		p.DX, p.DY = 0, 0
	}
}

// Over reports whether the match has ended.
func (m *Match) Over() bool { return m.over }

// Tick returns how many steps the match has taken.
func (m *Match) Tick() uint64 { return m.tick }

// Elapsed returns the play time so far.
func (m *Match) Elapsed() time.Duration { return m.elapsed }

// Result is what a finished match leaves behind: the leaderboard's input.
type Result struct {
	Match    string         `json:"match"`
	Reason   EndReason      `json:"reason"`
	Ticks    uint64         `json:"ticks"`
	Duration time.Duration  `json:"duration_ns"`
	Players  []PlayerResult `json:"players"` // best first
}

// PlayerResult is one player's line in a Result.
type PlayerResult struct {
	ID    PlayerID `json:"id"`
	Name  string   `json:"name"`
	Bot   bool     `json:"bot"`
	Score int      `json:"score"`
	Place int      `json:"place"` // 1 is the winner; equal scores share a place
}

// Result returns the standings; Reason is empty while the match runs.
func (m *Match) Result() Result {
	res := Result{Match: m.ID, Reason: m.reason, Ticks: m.tick, Duration: m.elapsed}
	for _, p := range m.players {
		res.Players = append(res.Players, PlayerResult{ID: p.ID, Name: p.Name, Bot: p.Bot, Score: p.Score})
	}
	sort.SliceStable(res.Players, func(i, j int) bool { return res.Players[i].Score > res.Players[j].Score })
	for i := range res.Players {
		if i > 0 && res.Players[i].Score == res.Players[i-1].Score {
			res.Players[i].Place = res.Players[i-1].Place
		} else {
			res.Players[i].Place = i + 1
		}
	}
	return res
}

// BotInput steers a bot toward the nearest orb that no other player is closer to (the
// nearest orb when every orb is contested), so bots spread out instead of chasing the same
// orb in a clump: the in-process bots that fill rooms.
func (m *Match) BotInput(id PlayerID) Input {
	p := m.byID[id]
	if p == nil || len(m.orbs) == 0 {
		return Input{Player: id}
	}
	var best, nearest Orb
	bestD, nearestD := math.Inf(1), math.Inf(1)
	for _, o := range m.orbs {
		d := math.Hypot(o.X-p.X, o.Y-p.Y)
		if d < nearestD {
			nearest, nearestD = o, d
		}
		if d >= bestD {
			continue
		}
		mine := true
		for _, q := range m.players {
			if q != p && !q.Left && math.Hypot(o.X-q.X, o.Y-q.Y) < d {
				mine = false
				break
			}
		}
		if mine {
			best, bestD = o, d
		}
	}
	if math.IsInf(bestD, 1) {
		best, bestD = nearest, nearestD
	}
	if bestD < 1e-9 {
		return Input{Player: id}
	}
	return Input{Player: id, DX: (best.X - p.X) / bestD, DY: (best.Y - p.Y) / bestD}
}

// AppendSnapshot appends the match's state as one JSON object, the message a room
// broadcasts every tick:
//
//	{"room":"m-1","seq":42,"left_ms":57900,"over":false,"reason":"","w":800,"h":600,
//	 "players":[{"id":"p1","name":"ann","bot":false,"x":1.5,"y":2,"score":3,"seq":7,"left":false}],
//	 "orbs":[[10,20]]}
//
// seq is the tick number (the long-poll's ?since). It is written by hand, not through
// encoding/json, because it runs for every room at 20 Hz.
func (m *Match) AppendSnapshot(b []byte) []byte {
	b = append(b, `{"room":`...)
	b = appendJSONString(b, m.ID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, m.tick, 10)
	b = append(b, `,"left_ms":`...)
	b = strconv.AppendInt(b, (m.cfg.Duration - m.elapsed).Milliseconds(), 10)
	b = append(b, `,"over":`...)
	b = strconv.AppendBool(b, m.over)
	b = append(b, `,"reason":`...)
	b = strconv.AppendQuote(b, string(m.reason))
	b = append(b, `,"w":`...)
	b = strconv.AppendFloat(b, m.cfg.Width, 'f', -1, 64)
	b = append(b, `,"h":`...)
	b = strconv.AppendFloat(b, m.cfg.Height, 'f', -1, 64)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(m.cfg.ScoreLimit), 10)
	b = append(b, `,"players":[`...)
	for i, p := range m.players {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, string(p.ID))
		b = append(b, `,"name":`...)
		b = appendJSONString(b, p.Name)
		b = append(b, `,"bot":`...)
		b = strconv.AppendBool(b, p.Bot)
		b = append(b, `,"x":`...)
		b = strconv.AppendFloat(b, math.Round(p.X*10)/10, 'f', -1, 64)
		b = append(b, `,"y":`...)
		b = strconv.AppendFloat(b, math.Round(p.Y*10)/10, 'f', -1, 64)
		b = append(b, `,"score":`...)
		b = strconv.AppendInt(b, int64(p.Score), 10)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, uint64(p.LastSeq), 10)
		b = append(b, `,"left":`...)
		b = strconv.AppendBool(b, p.Left)
		b = append(b, '}')
	}
	b = append(b, `],"orbs":[`...)
	for i, o := range m.orbs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, math.Round(o.X*10)/10, 'f', -1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, math.Round(o.Y*10)/10, 'f', -1, 64)
		b = append(b, ']')
	}
	return append(b, "]}"...)
}

// appendJSONString quotes s for JSON. Player ids and names come from clients, so this
// goes through encoding/json (strconv's Go quoting is not JSON for every rune).
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// matchState is a match's state as its snapshot holds it: all but its Config, which the
// restoring side has.
type matchState struct {
	ID      string        `json:"id"`
	RNG     []byte        `json:"rng"`
	Players []*Player     `json:"players"`
	Orbs    []Orb         `json:"orbs"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Tick    uint64        `json:"tick"`
	Over    bool          `json:"over"`
	Reason  EndReason     `json:"reason"`
}

// MarshalJSON encodes the match's state (not its Config): the snapshot a room hands to
// another node.
func (m *Match) MarshalJSON() ([]byte, error) {
	rng, err := m.src.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(matchState{ID: m.ID, RNG: rng, Players: m.players, Orbs: m.orbs, Elapsed: m.elapsed,
		Tick: m.tick, Over: m.over, Reason: m.reason})
}

// UnmarshalJSON sets the match's state from MarshalJSON's bytes, keeping its Config (make
// the match with NewMatch first).
func (m *Match) UnmarshalJSON(b []byte) error {
	var st matchState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	src := &rand.PCG{}
	if err := src.UnmarshalBinary(st.RNG); err != nil {
		return fmt.Errorf("game: match state: rng: %w", err)
	}
	byID := make(map[PlayerID]*Player, len(st.Players))
	for _, p := range st.Players {
		if p == nil {
			return errors.New("game: match state: a null player")
		}
		byID[p.ID] = p
	}
	m.ID, m.src, m.rng, m.players, m.byID, m.orbs = st.ID, src, rand.New(src), st.Players, byID, st.Orbs
	m.elapsed, m.tick, m.over, m.reason = st.Elapsed, st.Tick, st.Over, st.Reason
	return nil
}
