package room

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
	"github.com/batonrt/baton/internal/render"
)

func TestRoomTickAndOverrun(t *testing.T) {
	r := newRecord("a", 50*time.Millisecond, 25*time.Millisecond, 0)
	assert.False(t, r.Tick(time.Millisecond, 10*time.Millisecond, 10*time.Millisecond))
	assert.True(t, r.Tick(-time.Millisecond, 30*time.Millisecond, 30*time.Millisecond), "over budget")
	assert.False(t, r.Tick(0, 25*time.Millisecond, 90*time.Millisecond), "at the budget is not over it, however long its parks")
	r.Skipped(3)
	r.CaughtUp()
	r.Panicked()
	r.Input(5, 2, 1)
	r.SetMembers(4, 3)
	s := r.Snapshot(2 * sec)
	assert.Equal(t, "a", s.Name)
	assert.Equal(t, roomRunning, s.State)
	assert.EqualValues(t, 3, s.Ticks)
	assert.EqualValues(t, 1, s.Overruns)
	assert.EqualValues(t, 3, s.Skipped)
	assert.EqualValues(t, 1, s.CaughtUp)
	assert.EqualValues(t, 1, s.Panics)
	assert.EqualValues(t, 5, s.Inputs)
	assert.EqualValues(t, 2, s.Dropped)
	assert.EqualValues(t, 1, s.Refused)
	assert.Equal(t, 3, s.Queued)
	assert.Equal(t, 4, s.Members)
	assert.Equal(t, 30*time.Millisecond, s.TickDuration.Max)
	assert.Equal(t, 65*time.Millisecond, s.TickDuration.Sum)
	assert.Equal(t, 90*time.Millisecond, s.TickWall.Max, "wall time is a figure of its own")
	assert.Equal(t, 130*time.Millisecond, s.TickWall.Sum)
	assert.EqualValues(t, 3, s.TickWall.Count)
	assert.EqualValues(t, 3, s.TickLateness.Count)
	assert.Equal(t, time.Millisecond, s.TickLateness.Max, "negative lateness counts as 0")
	p50 := s.TickDuration.P50
	assert.InEpsilon(t, float64(25*time.Millisecond), float64(p50), 1.0/16, "one significant digit: within 1/16")
	r.SetState(roomStopped)
	assert.Equal(t, roomStopped, r.state)
}

func TestRoomShare(t *testing.T) {
	r := newRecord("a", time.Second, time.Second, 0)
	assert.Zero(t, r.share(sec/2, time.Second), "no complete second yet")
	r.LoopTime(sec/2, 250*time.Millisecond) // second 0
	r.LoopTime(sec+1, 500*time.Millisecond) // second 1
	r.LoopTime(2*sec, 900*time.Millisecond) // second 2 (incomplete at 2.5 s)
	now := 2*sec + sec/2
	assert.InDelta(t, 0.5, r.share(now, time.Second), 1e-9)
	assert.InDelta(t, 0.375, r.share(now, 10*time.Second), 1e-9, "the room is 2 s old: 0.75 s over 2 s")
	// A minute later the old seconds have left the window, and the ring's slots are reused.
	later := 70 * sec
	r.LoopTime(later-sec, 100*time.Millisecond)
	assert.InDelta(t, 0.1, r.share(later, time.Second), 1e-9)
	assert.InDelta(t, 0.1/60, r.share(later, time.Minute), 1e-9)
	assert.Equal(t, 1750*time.Millisecond, r.Snapshot(later).LoopTime)
	r.LoopTime(later, -time.Second) // ignored
	assert.Equal(t, 1750*time.Millisecond, r.Snapshot(later).LoopTime)
}

func TestTopRooms(t *testing.T) {
	var rooms []*record
	for i := range 5 {
		r := newRecord(fmt.Sprint("r", i), time.Second, time.Second, 0)
		r.LoopTime(sec+1, time.Duration(i)*10*time.Millisecond)
		r.Tick(0, time.Duration(i)*time.Millisecond, time.Duration(i)*time.Millisecond)
		rooms = append(rooms, r)
	}
	now := 2*sec + 1
	all := topRooms(rooms, now, 10)
	require.Len(t, all.Rooms, 5)
	assert.Nil(t, all.Other)
	assert.Equal(t, "r4", all.Rooms[0].Name, "largest share first")
	assert.Equal(t, "r0", all.Rooms[4].Name)
	top := topRooms(rooms, now, 2)
	require.Len(t, top.Rooms, 2)
	assert.Equal(t, []string{"r4", "r3"}, []string{top.Rooms[0].Name, top.Rooms[1].Name})
	require.NotNil(t, top.Other)
	assert.Equal(t, 3, top.Other.Rooms)
	assert.EqualValues(t, 3, top.Other.Ticks)
	assert.InDelta(t, 0.03, top.Other.Share[0], 1e-9, "r0..r2: 0+10+20 ms over the second")
	assert.Equal(t, 2*time.Millisecond, top.Other.TickDuration.Max)
	assert.Equal(t, 5, top.Total)

	var buf bytes.Buffer
	require.NoError(t, render.WriteRoomsJSON(&buf, top))
	var doc struct {
		Total int `json:"rooms_total"`
		Rooms []struct {
			Name  string  `json:"name"`
			Share float64 `json:"loop_share_1s"`
		} `json:"rooms"`
		Other struct {
			Rooms int `json:"rooms"`
		} `json:"other"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc), buf.String())
	assert.Equal(t, 5, doc.Total)
	assert.Equal(t, "r4", doc.Rooms[0].Name)
	assert.InDelta(t, 0.04, doc.Rooms[0].Share, 1e-9)
	assert.Equal(t, 3, doc.Other.Rooms)
	buf.Reset()
	require.NoError(t, render.WriteRoomsText(&buf, top))
	assert.Contains(t, buf.String(), "baton rooms: 5 (top 2")
	assert.Contains(t, buf.String(), "r4")
	assert.Contains(t, buf.String(), "(other: 3 rooms)")
	assert.Empty(t, topRooms(nil, now, 5).Rooms)
}

func TestRoomTickAllocatesNothing(t *testing.T) {
	r := newRecord("a", time.Second, time.Second, 0)
	allocs := testing.AllocsPerRun(1000, func() {
		r.Tick(time.Microsecond, 20*time.Microsecond, 20*time.Microsecond)
		r.LoopTime(sec, time.Microsecond)
	})
	assert.Zero(t, allocs)
}

// TestRoomSummaryMatchesHistogram: a room's 32-bit counters give the percentiles a
// Histogram of the same layout gives.
func TestRoomSummaryMatchesHistogram(t *testing.T) {
	r := newRecord("a", time.Second, time.Second, 0)
	h := hdr.New(roomLayout)
	var sum, mx int64
	v := int64(1)
	for i := range 5000 {
		v = (v*6364136223846793005 + 1442695040888963407) & (1<<62 - 1)
		d := v % int64(50*time.Millisecond)
		if i%100 == 0 {
			d = v % int64(2*time.Minute) // some beyond the limit
		}
		r.Tick(0, time.Duration(d), time.Duration(d))
		h.Record(d)
		sum += d
		mx = max(mx, d)
	}
	got := r.Snapshot(0).TickDuration
	want := hdr.SummaryOf(h, 1, time.Duration(sum), time.Duration(mx))
	want.Buckets = accounting.Buckets{} // a room's summaries carry no exporter buckets (yet)
	assert.Equal(t, want, got)
}

// sec is a second in the clock readings the tests make up.
const sec = int64(time.Second)
