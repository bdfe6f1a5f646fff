package servers

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// netRoom is a room of the net/http baseline, the Nakama pattern: its own goroutine driven
// by a time.Ticker, its state and input queue behind a mutex that the input handlers and
// the tick both take.
type netRoom struct {
	mu     sync.Mutex
	state  *RoomState
	inputs []Input
	heavy  bool
}

// netRooms is the baseline's rooms scenario.
type netRooms struct {
	mu    sync.Mutex // guards rooms (set once by setup) and setup
	rooms map[string]*netRoom
	setup RoomSetup
	rec   *tickRecorder
	stop  chan struct{}
	wg    sync.WaitGroup
}

// registerRoomsNetHTTP adds the rooms routes to mux; the returned function stops the rooms'
// goroutines.
func registerRoomsNetHTTP(mux *http.ServeMux) (stop func()) {
	nr := &netRooms{rec: newTickRecorder(), stop: make(chan struct{})}
	mux.HandleFunc("POST /rooms/setup", func(w http.ResponseWriter, r *http.Request) {
		var s RoomSetup
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			httpText(w, 400, "bad setup: "+err.Error()+"\n")
			return
		}
		if err := s.Validate(); err != nil {
			httpText(w, 400, err.Error()+"\n")
			return
		}
		nr.mu.Lock()
		if nr.rooms != nil {
			nr.mu.Unlock()
			httpText(w, 409, "rooms already set up\n")
			return
		}
		nr.setup = s
		nr.rec.setup(s)
		nr.rooms = make(map[string]*netRoom, s.Rooms+1)
		var started sync.WaitGroup
		n := s.Rooms
		if s.HeavyIters > 0 {
			n++
		}
		for i := range n {
			room := &netRoom{state: NewRoomState(uint64(i)), inputs: make([]Input, 0, RoomInputQueue)}
			name := roomName(i)
			if i == s.Rooms {
				room.heavy, name = true, HeavyRoomName
			}
			nr.rooms[name] = room
			nr.wg.Add(1)
			started.Add(1)
			go nr.run(room, stagger(i, n), &started)
		}
		nr.mu.Unlock()
		// The answer waits for the last room to start, so that the load (thousands of
		// connections opening) begins after the rooms' ticks are spread over the period.
		started.Wait()
		nr.rec.reset()
		httpText(w, 200, "ok")
	})
	mux.HandleFunc("POST /rooms/{id}/input", func(w http.ResponseWriter, r *http.Request) {
		var buf [64]byte
		n, _ := io.ReadFull(r.Body, buf[:])
		in, ok := ParseInput(buf[:n])
		if !ok {
			httpText(w, 400, "bad input\n")
			return
		}
		nr.mu.Lock()
		room := nr.rooms[r.PathValue("id")]
		nr.mu.Unlock()
		if room == nil {
			httpText(w, 404, "unknown room\n")
			return
		}
		room.mu.Lock()
		full := len(room.inputs) >= RoomInputQueue
		if !full {
			room.inputs = append(room.inputs, in)
		}
		room.mu.Unlock()
		nr.rec.input(!full)
		if full {
			w.Header().Set("Retry-After", "1")
			httpText(w, 429, "busy\n")
			return
		}
		httpText(w, 200, "ok")
	})
	mux.HandleFunc("POST /rooms/reset", func(w http.ResponseWriter, r *http.Request) {
		nr.rec.reset()
		httpText(w, 200, "ok")
	})
	mux.HandleFunc("GET /rooms/stats", func(w http.ResponseWriter, r *http.Request) {
		nr.mu.Lock()
		s := nr.setup
		nr.mu.Unlock()
		writeJSON(w, nr.rec.stats(s.Rooms, s.HeavyIters > 0))
	})
	return func() {
		close(nr.stop)
		nr.wg.Wait()
	}
}

// run is a room's goroutine: it starts ticking after offset (then marks started done) and measures each tick's
// lateness from the ticker's schedule (start + k*period; the ticker drops ticks its
// reader missed, which count as skipped).
func (nr *netRooms) run(room *netRoom, offset time.Duration, started *sync.WaitGroup) {
	defer nr.wg.Done()
	select {
	case <-time.After(offset):
	case <-nr.stop:
		started.Done()
		return
	}
	started.Done()
	start := time.Now()
	tk := time.NewTicker(RoomPeriod)
	defer tk.Stop()
	var k int64
	for {
		select {
		case <-tk.C:
		case <-nr.stop:
			return
		}
		now := time.Now()
		n := max(int64(now.Sub(start)/RoomPeriod), k+1)
		late := now.Sub(start.Add(time.Duration(n) * RoomPeriod))
		skipped := uint64(n - k - 1)
		k = n
		room.mu.Lock()
		applied := len(room.inputs)
		for _, in := range room.inputs {
			room.state.Apply(in)
		}
		room.inputs = room.inputs[:0]
		room.state.SimStep(nr.rec.iters(room.heavy))
		room.mu.Unlock()
		nr.rec.tick(room.heavy, max(late, 0), time.Since(now), skipped, applied)
	}
}

// httpText answers status with a text/plain body.
func httpText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}
