package servers

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The net/http baseline of ws-broadcast, the usual gorilla/websocket pattern: the handler
// goroutine upgrades and then reads until the connection ends; a writer goroutine per
// connection is fed by a buffered channel; each room's broadcaster is a goroutine on a
// time.Ticker that hands every member the message (a gorilla PreparedMessage, encoded once
// per broadcast) with a non-blocking send, closing members whose channel is full.

type gorillaClient struct {
	conn *websocket.Conn
	send chan *websocket.PreparedMessage
	once sync.Once
}

func (c *gorillaClient) closeSend() { c.once.Do(func() { close(c.send) }) }

type gorillaRoom struct {
	mu      sync.Mutex
	members map[*gorillaClient]struct{}
}

type gorillaHub struct {
	mu      sync.Mutex // guards rooms, started, stats
	rooms   map[int]*gorillaRoom
	started bool
	stats   WSStats
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (h *gorillaHub) room(i int) *gorillaRoom {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[i]
	if r == nil {
		r = &gorillaRoom{members: map[*gorillaClient]struct{}{}}
		h.rooms[i] = r
	}
	return r
}

// registerWSNetHTTP adds the ws-broadcast routes to mux; the returned function stops the
// broadcasters.
func registerWSNetHTTP(mux *http.ServeMux) (stop func()) {
	h := &gorillaHub{rooms: map[int]*gorillaRoom{}, stop: make(chan struct{})}
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024, CheckOrigin: func(*http.Request) bool { return true }}
	mux.HandleFunc("GET /ws/{room}", func(w http.ResponseWriter, r *http.Request) {
		idx := wsRoomIndex(r.PathValue("room"))
		if idx < 0 {
			httpText(w, 404, "unknown room\n")
			return
		}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade answered
		}
		c := &gorillaClient{conn: conn, send: make(chan *websocket.PreparedMessage, WSSendQueue)}
		room := h.room(idx)
		room.mu.Lock()
		room.members[c] = struct{}{}
		room.mu.Unlock()
		h.mu.Lock()
		h.stats.Conns++
		h.mu.Unlock()
		go c.writer(h)
		for { // the client sends nothing but control frames, which gorilla handles
			if _, _, err := conn.ReadMessage(); err != nil {
				break
			}
		}
		room.mu.Lock()
		delete(room.members, c)
		room.mu.Unlock()
		h.mu.Lock()
		h.stats.Conns--
		h.mu.Unlock()
		c.closeSend()
		conn.Close()
	})
	mux.HandleFunc("POST /ws/start", func(w http.ResponseWriter, r *http.Request) {
		var s WSStart
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			httpText(w, 400, "bad start: "+err.Error()+"\n")
			return
		}
		if err := s.Validate(); err != nil {
			httpText(w, 400, err.Error()+"\n")
			return
		}
		h.mu.Lock()
		if h.started {
			h.mu.Unlock()
			httpText(w, 409, "already started\n")
			return
		}
		h.started = true
		h.mu.Unlock()
		for i := range s.Rooms {
			h.wg.Add(1)
			go h.broadcaster(i, h.room(i), time.Duration(int64(WSPeriod)*int64(i)/int64(s.Rooms)))
		}
		httpText(w, 200, "ok")
	})
	mux.HandleFunc("GET /ws/stats", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		s := h.stats
		h.mu.Unlock()
		writeJSON(w, s)
	})
	return func() {
		close(h.stop)
		h.wg.Wait()
	}
}

// writer writes what the broadcaster queues, until the channel is closed: by the reader
// when the connection ended, or by the broadcaster when the client was too slow (then it
// says so with a 1008 close).
func (c *gorillaClient) writer(h *gorillaHub) {
	for m := range c.send {
		if err := c.conn.WritePreparedMessage(m); err != nil {
			c.conn.Close()
			for range c.send { // let the broadcaster's sends drain until the reader closes
			}
			return
		}
	}
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "slow consumer"), time.Now().Add(time.Second))
	c.conn.Close()
}

// broadcaster sends room i's state to its members every WSPeriod, starting after offset
// (rooms are staggered over one period).
func (h *gorillaHub) broadcaster(i int, room *gorillaRoom, offset time.Duration) {
	defer h.wg.Done()
	select {
	case <-time.After(offset):
	case <-h.stop:
		return
	}
	tk := time.NewTicker(WSPeriod)
	defer tk.Stop()
	var payload [WSPayload]byte
	var seq uint64
	for {
		select {
		case <-tk.C:
		case <-h.stop:
			return
		}
		seq++
		wsMessage(payload[:], i, seq)
		m, err := websocket.NewPreparedMessage(websocket.BinaryMessage, payload[:])
		if err != nil {
			continue
		}
		var sent, slow uint64
		room.mu.Lock()
		for c := range room.members {
			select {
			case c.send <- m:
				sent++
			default:
				delete(room.members, c)
				c.closeSend()
				slow++
			}
		}
		room.mu.Unlock()
		h.mu.Lock()
		h.stats.Broadcasts++
		h.stats.Sent += sent
		h.stats.SlowClosed += slow
		h.mu.Unlock()
	}
}
