package directory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// NewShared returns an Embedded directory whose state lives in the file at path (made if
// missing, with path+".lock" beside it), shared by every process of the machine that
// opens the same path: the same-machine case of a handoff, where a new process takes the
// port and the rooms of the one it replaces (docs/handoff.md, "One machine"). Each call
// takes an exclusive lock on the lock file (flock), reads the state, and writes it back
// (to a temporary file renamed over it) if the call changed it; leases lapse by the
// machine's monotonic clock (CLOCK_MONOTONIC), which every process reads alike, so a
// process that stops renewing loses its rooms to the others as on etcd. Tokens keep
// growing across processes as long as the file lives (put it where a reboot keeps it, or
// not: leases from before a reboot are lapsed on the next call). The state is rewritten
// whole on each change: meant for one machine's rooms (thousands), not a fleet's (use
// etcd). Linux only (ErrUnavailable elsewhere). Any goroutine.
func NewShared(path string) (*Embedded, error) {
	f, err := openShared(path)
	if err != nil {
		return nil, fmt.Errorf("directory: shared directory %s: %w", path, err)
	}
	return &Embedded{st: newState(), file: f}, nil
}

// sharedFile is a shared directory's file. Its methods are called under Embedded.mu.
type sharedFile struct {
	path string
	lk   *os.File // the lock file, open for the directory's life
}

// read replaces st with the file's state and returns the bytes read (nil: no file yet, an
// empty state).
func (f *sharedFile) read(st *memState) ([]byte, error) {
	*st = newState()
	b, err := os.ReadFile(f.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	if err := st.check(); err != nil {
		return nil, fmt.Errorf("%s is not a consistent directory (remove it to start afresh: every lease and claim in it is lost): %w", f.path, err)
	}
	return b, nil
}

// check reports why a state read from a file is not one this package writes (another
// program's bytes, a hand edit), and gives its empty maps their zero value.
func (st *memState) check() error {
	if st.Leases == nil {
		st.Leases = map[int64]*memLease{}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]memNode{}
	}
	if st.Rooms == nil {
		st.Rooms = map[string]memRoom{}
	}
	if st.Rev < 0 {
		return fmt.Errorf("revision %d", st.Rev)
	}
	for id, l := range st.Leases {
		switch {
		case l == nil || l.TTL <= 0:
			return fmt.Errorf("lease %d: missing or without a TTL", id)
		case id <= 0 || id > st.LastLease:
			return fmt.Errorf("lease %d: not in 1..%d", id, st.LastLease)
		}
		if l.Rooms == nil {
			l.Rooms = map[string]struct{}{}
		}
		for room := range l.Rooms {
			if r, ok := st.Rooms[room]; !ok || r.Lease != id {
				return fmt.Errorf("lease %d holds room %q, which is not claimed under it", id, room)
			}
		}
	}
	for name, n := range st.Nodes {
		if l, ok := st.Leases[n.Lease]; !ok || l.Node != name || n.Info.ID != name {
			return fmt.Errorf("node %q: its lease %d is not its own", name, n.Lease)
		}
	}
	for name, r := range st.Rooms {
		l, ok := st.Leases[r.Lease]
		if !ok || r.Claim.Room != name || r.Claim.Token <= 0 || Token(st.Rev) < r.Claim.Token {
			return fmt.Errorf("room %q: its claim (lease %d, token %d) is not consistent", name, r.Lease, r.Claim.Token)
		}
		if _, held := l.Rooms[name]; !held {
			return fmt.Errorf("room %q: not held by its lease %d", name, r.Lease)
		}
	}
	return nil
}

// write stores st unless it is what was read: to a temporary file renamed over the file,
// so that a process that dies mid-write leaves the previous state.
func (f *sharedFile) write(st *memState, loaded []byte) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if bytes.Equal(b, loaded) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".*")
	if err != nil {
		return err
	}
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Close()
	} else {
		_ = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
