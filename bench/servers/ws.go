package servers

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// The ws-broadcast scenario: WebSocket connections join rooms (GET /ws/{room}, room-0 ...
// room-(N-1)); POST /ws/start makes every room send a state message to all its members at
// 20 Hz. Each message is binary, WSPayload bytes, and starts with the send time (Unix
// nanoseconds, little endian; see wsload.StampLen), then the room number and a sequence
// number; the client measures delivery latency from it.
const (
	// WSPeriod is each room's broadcast period (20 Hz).
	WSPeriod = 50 * time.Millisecond
	// WSPayload is the size of a state message.
	WSPayload = 200
	// WSSendQueue is the net/http baseline's per-connection send channel: a connection
	// whose channel is full when a broadcast comes is closed as a slow consumer (1008).
	WSSendQueue = 64
)

// WSStart is the JSON body of POST /ws/start.
type WSStart struct {
	Rooms int `json:"rooms"` // rooms room-0 ... room-(N-1) start broadcasting
}

// Validate reports the first invalid field. Any goroutine.
func (s WSStart) Validate() error {
	if s.Rooms <= 0 || s.Rooms > 10_000 {
		return errors.New("servers: WSStart.Rooms must be in 1..10000, got " + strconv.Itoa(s.Rooms))
	}
	return nil
}

// WSStats is the JSON body of GET /ws/stats: totals since the server started.
type WSStats struct {
	Conns      int    `json:"conns"`       // open connections that joined a room
	Broadcasts uint64 `json:"broadcasts"`  // room broadcasts made
	Sent       uint64 `json:"sent"`        // messages handed to connections (queued or written)
	SlowClosed uint64 `json:"slow_closed"` // connections closed as slow consumers
}

// wsMessage fills p (WSPayload bytes) with a state message of room, sequence seq, stamped
// now.
func wsMessage(p []byte, room int, seq uint64) {
	binary.LittleEndian.PutUint64(p[0:8], uint64(time.Now().UnixNano()))
	binary.LittleEndian.PutUint32(p[8:12], uint32(room))
	binary.LittleEndian.PutUint64(p[12:20], seq)
	for i := 20; i < len(p); i++ {
		p[i] = byte('a' + (i+int(seq))%26)
	}
}

// wsRoomIndex parses "room-N" into N, or -1.
func wsRoomIndex(name string) int {
	s, ok := cutPrefix(name, "room-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= 10_000 {
		return -1
	}
	return n
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return s, false
	}
	return s[len(prefix):], true
}
