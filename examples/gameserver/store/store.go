// Package store keeps the game's player profiles, match results and leaderboard in an
// embedded SQLite database (modernc.org/sqlite: pure Go, no cgo, one file).
//
// Every method blocks on disk I/O, so the server calls them only from the offload pool
// (offload.Do with the handler's or background task's *loop.Task), never on the loop
// itself. A Store is safe for concurrent use; it holds one connection, since SQLite
// serialises writers anyway and one connection keeps the pool's figures honest (a slow
// query shows as a slow offloaded call, not as a wait for a connection).
package store

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/batonrt/baton/examples/gameserver/game"
)

// schema creates the tables on first start. A match is recorded once (its id is the
// primary key), so a batch written twice after a retry counts once.
const schema = `
CREATE TABLE IF NOT EXISTS players (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	bot        INTEGER NOT NULL DEFAULT 0,
	created_ns INTEGER NOT NULL,
	matches    INTEGER NOT NULL DEFAULT 0,
	wins       INTEGER NOT NULL DEFAULT 0,
	total      INTEGER NOT NULL DEFAULT 0,
	best       INTEGER NOT NULL DEFAULT 0,
	key_hash   TEXT -- SHA-256 of the player's key, hex; NULL: not claimed (bots, older files)
);
CREATE INDEX IF NOT EXISTS players_total ON players (total DESC);
CREATE TABLE IF NOT EXISTS matches (
	id          TEXT PRIMARY KEY,
	reason      TEXT NOT NULL,
	ticks       INTEGER NOT NULL,
	duration_ns INTEGER NOT NULL,
	ended_ns    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS scores (
	match  TEXT NOT NULL REFERENCES matches (id),
	player TEXT NOT NULL REFERENCES players (id),
	score  INTEGER NOT NULL,
	place  INTEGER NOT NULL,
	PRIMARY KEY (match, player)
);
CREATE TABLE IF NOT EXISTS fences (
	room  TEXT PRIMARY KEY,
	token INTEGER NOT NULL -- the highest fencing token a result of the room was written with
);`

// Store is the game's database. Safe for concurrent use; every method blocks.
type Store struct {
	db   *sql.DB
	path string
}

// DefaultBusyTimeout is how long a write waits for a lock another connection holds
// (SQLITE_BUSY) before it fails.
const DefaultBusyTimeout = 5 * time.Second

// Options tune Open; the zero value takes the defaults.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another connection
	// before it fails with SQLITE_BUSY. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration
}

// Open opens (creating it and its directory on first start) the database file at path.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, o Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty database path")
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: create schema in %s: %w", path, err)
	}
	if err := migrate(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// migrate brings a file made by an older version up to the schema: players.key_hash.
func migrate(db *sql.DB) error {
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('players') WHERE name = 'key_hash'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		_, err := db.Exec(`ALTER TABLE players ADD COLUMN key_hash TEXT`)
		return err
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database; writes already returned are on disk.
func (s *Store) Close() error { return s.db.Close() }

// Profile is a player's record.
type Profile struct {
	ID      game.PlayerID `json:"id"`
	Name    string        `json:"name"`
	Bot     bool          `json:"bot"`
	Created time.Time     `json:"created"`
	Matches int           `json:"matches"`
	Wins    int           `json:"wins"`
	Total   int           `json:"total"` // points over every match
	Best    int           `json:"best"`  // best single match
}

// ErrKeyRequired and ErrWrongKey are CheckKey's and SaveProfile's answers for a claimed
// player id when the key is missing or is not the one issued.
var (
	ErrKeyRequired = errors.New("store: this player id is claimed: its key is required")
	ErrWrongKey    = errors.New("store: wrong key for this player id")
)

// hashKey is what the players table keeps of a key: its SHA-256 in hex. A key is 256
// random bits, so a plain hash is enough (no salt or stretching: nothing to brute-force).
func hashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// checkKey compares key with a stored hash (NULL: the id is not claimed) in constant time.
func checkKey(stored sql.NullString, key string) error {
	switch {
	case !stored.Valid:
		return nil
	case key == "":
		return ErrKeyRequired
	case subtle.ConstantTimeCompare([]byte(hashKey(key)), []byte(stored.String)) != 1:
		return ErrWrongKey
	}
	return nil
}

// CheckKey reports whether key may act as player id: nil when the id is unknown or not
// claimed, or key is its key; ErrKeyRequired or ErrWrongKey otherwise. It changes nothing.
func (s *Store) CheckKey(ctx context.Context, id game.PlayerID, key string) error {
	var stored sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT key_hash FROM players WHERE id = ?`, string(id)).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: check key of %q: %w", id, err)
	}
	return checkKey(stored, key)
}

// SaveProfile saves a human player's profile under name, in one transaction: an unknown
// or unclaimed id is claimed and a new key is issued (returned; the file keeps only its
// hash); a claimed id is renamed only when key is its key (else ErrKeyRequired or
// ErrWrongKey, and nothing changes), and issued is "".
func (s *Store) SaveProfile(ctx context.Context, id game.PlayerID, name, key string, now time.Time) (issued string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("store: save profile %q: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var stored sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT key_hash FROM players WHERE id = ?`, string(id)).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		issued = game.NewSecret()
		_, err = tx.ExecContext(ctx, `INSERT INTO players (id, name, bot, created_ns, key_hash) VALUES (?, ?, 0, ?, ?)`,
			string(id), name, now.UnixNano(), hashKey(issued))
	case err != nil:
	case !stored.Valid:
		issued = game.NewSecret()
		_, err = tx.ExecContext(ctx, `UPDATE players SET name = ?, key_hash = ? WHERE id = ?`, name, hashKey(issued), string(id))
	default:
		if err = checkKey(stored, key); err != nil {
			return "", err
		}
		_, err = tx.ExecContext(ctx, `UPDATE players SET name = ? WHERE id = ?`, name, string(id))
	}
	if err != nil {
		return "", fmt.Errorf("store: save profile %q: %w", id, err)
	}
	if err = tx.Commit(); err != nil {
		return "", fmt.Errorf("store: save profile %q: %w", id, err)
	}
	return issued, nil
}

// ForgetUnplayed deletes the profiles of human players created before cutoff who never
// finished a match, except those in keep (players queued or in play), and returns how many
// went: a flood of made-up player ids leaves no rows behind.
func (s *Store) ForgetUnplayed(ctx context.Context, cutoff time.Time, keep []game.PlayerID) (int, error) {
	if keep == nil {
		keep = []game.PlayerID{} // "[]": json_each(null) yields a NULL row, and NOT IN (NULL) is never true
	}
	ids, err := json.Marshal(keep)
	if err != nil {
		return 0, err
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM players WHERE bot = 0 AND matches = 0 AND created_ns < ?
		AND id NOT IN (SELECT value FROM json_each(?))`, cutoff.UnixNano(), string(ids))
	if err != nil {
		return 0, fmt.Errorf("store: forget unplayed players: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Players counts the profiles, bots included.
func (s *Store) Players(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM players`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count players: %w", err)
	}
	return n, nil
}

// Profile returns a player's record; ok is false for an unknown player.
func (s *Store) Profile(ctx context.Context, id game.PlayerID) (p Profile, ok bool, err error) {
	var created int64
	err = s.db.QueryRowContext(ctx, `SELECT id, name, bot, created_ns, matches, wins, total, best FROM players WHERE id = ?`, string(id)).
		Scan(&p.ID, &p.Name, &p.Bot, &created, &p.Matches, &p.Wins, &p.Total, &p.Best)
	if errors.Is(err, sql.ErrNoRows) {
		return Profile{}, false, nil
	}
	if err != nil {
		return Profile{}, false, fmt.Errorf("store: profile %q: %w", id, err)
	}
	p.Created = time.Unix(0, created).UTC()
	return p, true, nil
}

// Finished is a match result with the time it ended, the unit RecordMatches writes.
type Finished struct {
	Result game.Result
	Ended  time.Time
	// Room and Token are the room that played the match and its fencing token
	// (room.Room.Token): a result whose token is older than the highest one written for the
	// room is refused, so a node that lost the room (paused past its lease, then resumed)
	// cannot write over its new owner's results. Token 0 is not fenced.
	Room  string
	Token int64
}

// RecordMatches writes a batch of finished matches in one transaction: the matches, every
// player's score, and the players' totals (profiles are created for players never seen).
// A match already recorded is skipped, so retrying a batch is safe, and so is a match whose
// fencing token is older than its room's highest (Finished.Token). It returns how many
// matches were new.
func (s *Store) RecordMatches(ctx context.Context, batch []Finished) (recorded int, err error) {
	if len(batch) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("store: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, f := range batch {
		r := f.Result
		if f.Token > 0 {
			res, err := tx.ExecContext(ctx, `INSERT INTO fences (room, token) VALUES (?, ?)
				ON CONFLICT (room) DO UPDATE SET token = excluded.token WHERE excluded.token >= fences.token`, f.Room, f.Token)
			if err != nil {
				return 0, fmt.Errorf("store: fence of room %q: %w", f.Room, err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				continue // a stale owner's result: the room has a newer token
			}
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO matches (id, reason, ticks, duration_ns, ended_ns) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, r.Match, string(r.Reason), int64(r.Ticks), int64(r.Duration), f.Ended.UnixNano())
		if err != nil {
			return 0, fmt.Errorf("store: record match %s: %w", r.Match, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			continue // recorded by an earlier batch
		}
		recorded++
		for _, p := range r.Players {
			win := 0
			if p.Place == 1 {
				win = 1
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO players (id, name, bot, created_ns, matches, wins, total, best) VALUES (?, ?, ?, ?, 1, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET matches = matches + 1, wins = wins + excluded.wins,
				total = total + excluded.total, best = max(best, excluded.best)`,
				string(p.ID), p.Name, p.Bot, f.Ended.UnixNano(), win, p.Score, p.Score); err != nil {
				return 0, fmt.Errorf("store: record player %q of match %s: %w", p.ID, r.Match, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO scores (match, player, score, place) VALUES (?, ?, ?, ?)`,
				r.Match, string(p.ID), p.Score, p.Place); err != nil {
				return 0, fmt.Errorf("store: record score of %q in match %s: %w", p.ID, r.Match, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("store: commit: %w", err)
	}
	return recorded, nil
}

// Entry is one line of the leaderboard.
type Entry struct {
	Rank    int           `json:"rank"`
	ID      game.PlayerID `json:"id"`
	Name    string        `json:"name"`
	Bot     bool          `json:"bot"`
	Total   int           `json:"total"`
	Best    int           `json:"best"`
	Wins    int           `json:"wins"`
	Matches int           `json:"matches"`
}

// Leaderboard returns the top limit players by total points (ties: more wins, then
// fewer matches, then id), bots included only when bots is true.
func (s *Store) Leaderboard(ctx context.Context, limit int, bots bool) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, bot, total, best, wins, matches FROM players
		WHERE matches > 0 AND (? OR bot = 0) ORDER BY total DESC, wins DESC, matches ASC, id LIMIT ?`, bots, limit)
	if err != nil {
		return nil, fmt.Errorf("store: leaderboard: %w", err)
	}
	defer rows.Close()
	out := []Entry{}
	for rows.Next() {
		e := Entry{Rank: len(out) + 1}
		if err := rows.Scan(&e.ID, &e.Name, &e.Bot, &e.Total, &e.Best, &e.Wins, &e.Matches); err != nil {
			return nil, fmt.Errorf("store: leaderboard: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: leaderboard: %w", err)
	}
	return out, nil
}

// MatchScores returns a recorded match's scores by player; ok is false for a match not
// recorded.
func (s *Store) MatchScores(ctx context.Context, match string) (scores map[game.PlayerID]int, ok bool, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT player, score FROM scores WHERE match = ?`, match)
	if err != nil {
		return nil, false, fmt.Errorf("store: scores of %s: %w", match, err)
	}
	defer rows.Close()
	scores = map[game.PlayerID]int{}
	for rows.Next() {
		var id string
		var sc int
		if err := rows.Scan(&id, &sc); err != nil {
			return nil, false, fmt.Errorf("store: scores of %s: %w", match, err)
		}
		scores[game.PlayerID(id)] = sc
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("store: scores of %s: %w", match, err)
	}
	return scores, len(scores) > 0, nil
}

// Matches counts the recorded matches.
func (s *Store) Matches(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM matches`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count matches: %w", err)
	}
	return n, nil
}
