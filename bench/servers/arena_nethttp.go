package servers

import (
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonrt/baton/bench/arena"
)

// The net/http baseline of the arena, as the shared rig's gorilla target writes it: a
// goroutine per connection reads its player's inputs into the room under the room's
// mutex; a goroutine per room, on a time.Ticker, applies them, steps, encodes the state
// once (websocket.PreparedMessage) and writes it to the room's players, each write with
// a deadline of arenaWriteWait.

const arenaWriteWait = 5 * time.Second

type gorillaArenaRoom struct {
	id     int
	mu     sync.Mutex
	sim    *arena.Sim
	inputs []arena.Input
	conns  [arena.Players]*websocket.Conn
	n      int
	done   chan struct{}
}

type gorillaArena struct {
	mu    sync.Mutex
	rooms map[int]*gorillaArenaRoom
	stop  chan struct{}
	wg    sync.WaitGroup
}

// registerArenaNetHTTP adds the arena route to mux; the returned function stops the
// rooms' goroutines.
func registerArenaNetHTTP(mux *http.ServeMux) (stop func()) {
	h := &gorillaArena{rooms: map[int]*gorillaArenaRoom{}, stop: make(chan struct{})}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	mux.HandleFunc("GET "+ArenaPath, func(w http.ResponseWriter, r *http.Request) {
		id, slot, ok := ParseArenaQuery(r.URL.RawQuery)
		if !ok {
			httpText(w, 400, "bad room or slot\n")
			return
		}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade answered
		}
		rm := h.join(id, slot, conn)
		defer h.leave(rm, slot, conn)
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			in, ok := arena.ParseInput(data)
			if !ok {
				continue
			}
			in.Slot = slot
			rm.mu.Lock()
			rm.inputs = append(rm.inputs, in)
			rm.mu.Unlock()
		}
	})
	return func() {
		close(h.stop)
		h.wg.Wait()
	}
}

func (h *gorillaArena) join(id, slot int, conn *websocket.Conn) *gorillaArenaRoom {
	h.mu.Lock()
	defer h.mu.Unlock()
	rm := h.rooms[id]
	if rm == nil {
		rm = &gorillaArenaRoom{id: id, sim: arena.NewSim(uint32(id)), done: make(chan struct{})}
		h.rooms[id] = rm
		h.wg.Add(1)
		go h.run(rm)
	}
	rm.mu.Lock()
	if old := rm.conns[slot]; old != nil {
		old.Close()
	} else {
		rm.n++
	}
	rm.conns[slot] = conn
	rm.mu.Unlock()
	return rm
}

func (h *gorillaArena) leave(rm *gorillaArenaRoom, slot int, conn *websocket.Conn) {
	conn.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.conns[slot] != conn {
		return
	}
	rm.conns[slot] = nil
	if rm.n--; rm.n == 0 {
		delete(h.rooms, rm.id)
		close(rm.done)
	}
}

// run is the room's goroutine: one tick per period until the room empties.
func (h *gorillaArena) run(rm *gorillaArenaRoom) {
	defer h.wg.Done()
	t := time.NewTicker(arena.Period)
	defer t.Stop()
	buf := make([]byte, arena.StateSize)
	var to [arena.Players]*websocket.Conn
	for {
		select {
		case <-rm.done:
			return
		case <-h.stop:
			return
		case <-t.C:
		}
		rm.mu.Lock()
		for _, in := range rm.inputs {
			rm.sim.Apply(in)
		}
		rm.inputs = rm.inputs[:0]
		rm.sim.Step()
		msg := rm.sim.Encode(buf, time.Now())
		to = rm.conns
		rm.mu.Unlock()
		pm, err := websocket.NewPreparedMessage(websocket.BinaryMessage, msg)
		if err != nil {
			continue
		}
		for _, c := range to {
			if c == nil {
				continue
			}
			_ = c.SetWriteDeadline(time.Now().Add(arenaWriteWait))
			if c.WritePreparedMessage(pm) != nil {
				c.Close() // the reader sees it and leaves the room
			}
		}
	}
}
