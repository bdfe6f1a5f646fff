package servers

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/ws"
)

// registerWSBaton adds the ws-broadcast routes to srv: connections are upgraded on the
// loop and their handler's task reads until the connection ends; each room's broadcast is
// a background task (Loop.Every) that encodes the frame once (ws.NewPrepared) and
// hands it to every member (ws.Broadcast). Room membership is a plain slice per room,
// touched only on the loop.
func registerWSBaton(srv *loop.Server) {
	var (
		members = map[int][]*ws.Conn{}
		stats   WSStats
		started bool
	)
	allowAll := ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }}
	srv.Handle("GET /ws/{room}", func(c *loop.Ctx) {
		idx := wsRoomIndex(c.PathValue("room"))
		if idx < 0 {
			c.String(404, "unknown room\n")
			return
		}
		conn, err := ws.Upgrade(c, allowAll)
		if err != nil {
			return // Upgrade answered
		}
		members[idx] = append(members[idx], conn)
		stats.Conns++
		for { // the client sends nothing but control frames, which the loop answers
			if _, _, err = conn.ReadMessage(); err != nil {
				break
			}
		}
		if errors.Is(err, ws.ErrSlowConsumer) {
			stats.SlowClosed++
		}
		list := members[idx]
		for i, w := range list {
			if w == conn {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				members[idx] = list[:len(list)-1]
				break
			}
		}
		stats.Conns--
	})
	srv.Handle("POST /ws/start", func(c *loop.Ctx) {
		var s WSStart
		if err := json.Unmarshal(c.Body(), &s); err != nil {
			c.String(400, "bad start: "+err.Error()+"\n")
			return
		}
		if err := s.Validate(); err != nil {
			c.String(400, err.Error()+"\n")
			return
		}
		if started {
			c.String(409, "already started\n")
			return
		}
		started = true
		// Rooms start over one period, staggered as the baseline's broadcasters are.
		srv.Loop(0).Go("ws-start", func(t *loop.Task) {
			began := time.Now()
			for i := range s.Rooms {
				if d := time.Duration(int64(WSPeriod)*int64(i)/int64(s.Rooms)) - time.Since(began); d > 0 {
					if t.Sleep(d) != nil {
						return
					}
				}
				var payload [WSPayload]byte
				var seq uint64
				srv.Loop(0).Every("ws-room", WSPeriod, func(*loop.Task) {
					seq++
					wsMessage(payload[:], i, seq)
					sent := ws.Broadcast(ws.NewPrepared(true, payload[:]), members[i])
					stats.Broadcasts++
					stats.Sent += uint64(sent)
				})
			}
		})
		c.String(200, "ok")
	})
	srv.Handle("GET /ws/stats", func(c *loop.Ctx) { c.JSON(200, stats) })
}
