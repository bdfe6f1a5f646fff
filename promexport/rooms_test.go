package promexport

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop/stats"
)

// listed is a listed room of a made-up snapshot: its name, age and ticks (its overruns are
// a tenth of its ticks, its other figures zero).
func listed(name string, age time.Duration, ticks uint64) accounting.RoomSnapshot {
	return accounting.RoomSnapshot{Name: name, Age: age, Ticks: ticks, Overruns: ticks / 10, Rooms: 1}
}

func other(ticks uint64, n int) *accounting.RoomSnapshot {
	return &accounting.RoomSnapshot{Name: "other", Ticks: ticks, Rooms: n}
}

// The room counters over made-up snapshots, one a second: rooms that leave the table keep
// their counts, a room made again under the same name is a new room, rooms folded into
// the "other" row are not counted twice, a fall there is absorbed, and an older snapshot
// changes nothing.
func TestRoomCountersSurviveRooms(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	sec := func(s int) time.Duration { return time.Duration(s) * time.Second }
	var c roomCounters
	step := func(s int, want uint64, rooms []accounting.RoomSnapshot, oth *accounting.RoomSnapshot) {
		t.Helper()
		f := c.update(at(s), &accounting.RoomsSnapshot{Rooms: rooms, Other: oth, Total: len(rooms)})
		require.Equal(t, want, f[figTicks], "ticks at %d s", s)
	}
	step(0, 150, []accounting.RoomSnapshot{listed("a", sec(10), 100), listed("b", sec(5), 50)}, nil)
	// a stops at 120 ticks; b goes on.
	step(1, 180, []accounting.RoomSnapshot{listed("a", sec(11), 120), listed("b", sec(6), 60)}, nil)
	// a leaves the table: its 120 stay counted.
	step(2, 190, []accounting.RoomSnapshot{listed("b", sec(7), 70)}, nil)
	assert.EqualValues(t, 12+7, c.out[figOverruns])
	// A new room named a (age 0.5 s) is not the old a.
	step(3, 120+80+5, []accounting.RoomSnapshot{listed("a", 500*time.Millisecond, 5), listed("b", sec(8), 80)}, nil)
	// Two rooms named a at once (the new one and a newer one), then the older leaves.
	step(4, 120+90+10+1, []accounting.RoomSnapshot{listed("a", 1500*time.Millisecond, 10), listed("a", 200*time.Millisecond, 1), listed("b", sec(9), 90)}, nil)
	step(5, 120+10+100+3, []accounting.RoomSnapshot{listed("a", 1200*time.Millisecond, 3), listed("b", sec(10), 100)}, nil)
	// Rooms folded into "other" (b moves there, with a room we never saw listed): b is not
	// counted as gone.
	step(6, 120+10+(3+1)+(101+40), []accounting.RoomSnapshot{listed("a", 2200*time.Millisecond, 4)}, other(101+40, 2))
	// A room leaves from "other": the sum falls by 40 but the counter does not.
	step(7, 275, []accounting.RoomSnapshot{listed("a", 3200*time.Millisecond, 5)}, other(102, 1))
	// ... and counts again from there: +1 for a, +3 for other.
	step(8, 279, []accounting.RoomSnapshot{listed("a", 4200*time.Millisecond, 6)}, other(105, 1))
	// An older snapshot (a scrape that began before the last one) changes nothing.
	step(7, 279, []accounting.RoomSnapshot{listed("a", 3200*time.Millisecond, 5)}, other(102, 1))
	// Back to every room listed; none missing is taken for gone while "other" was there.
	step(9, 279+1+1, []accounting.RoomSnapshot{listed("a", 5200*time.Millisecond, 7), listed("b", sec(14), 106)}, nil)
	step(10, 281+2, []accounting.RoomSnapshot{listed("a", 6200*time.Millisecond, 8), listed("b", sec(15), 107)}, nil)
}

// On a live server the room counters are the sums of the rooms' own figures (checked
// once the rooms stopped, when their figures no longer change), and stopping the rooms
// makes none of them fall.
func TestRoomCountersLive(t *testing.T) {
	f := newFlagship(t)
	scrape := adminScrape(t, Registry(f.srv))
	f.play(t, 3)
	counted := func(mfs map[string]*dto.MetricFamily) bool {
		return value(mfs, "baton_rooms_tick_overruns_total", nil) >= 3 && value(mfs, "baton_rooms_inputs_dropped_total", nil) >= 3
	}
	running := waitFor(t, scrape, "overruns and dropped inputs counted", counted)
	f.mu.Lock()
	for _, r := range f.rooms {
		r.Stop()
		<-r.Done()
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := stats.Take(ctx, f.srv, stats.ViewSections)
	require.NoError(t, err)
	var want figures
	rs := roomsOf(&snap)
	require.NotEmpty(t, rs.Rooms)
	for i := range rs.Rooms {
		assert.Equal(t, "stopped", rs.Rooms[i].State)
		want.add(figuresOf(&rs.Rooms[i]))
	}
	require.Nil(t, rs.Other)
	stopped := parse(t, scrape())
	for fam, k := range map[string]int{
		"baton_rooms_ticks_total": figTicks, "baton_rooms_tick_overruns_total": figOverruns,
		"baton_rooms_ticks_skipped_total": figSkipped, "baton_rooms_inputs_total": figInputs,
		"baton_rooms_inputs_dropped_total": figDropped,
	} {
		assert.EqualValues(t, want[k], value(stopped, fam, nil), fam)
		assert.GreaterOrEqual(t, value(stopped, fam, nil), value(running, fam, nil), fam)
	}
	assert.InDelta(t, time.Duration(want[figTickNanos]).Seconds(), value(stopped, "baton_rooms_tick_seconds_total", nil), 1e-9)
	assert.InDelta(t, time.Duration(want[figLateNanos]).Seconds(), value(stopped, "baton_rooms_tick_lateness_seconds_total", nil), 1e-9)
	assert.Positive(t, value(stopped, "baton_rooms_tick_lateness_seconds_total", nil))
	assert.EqualValues(t, 2, value(stopped, "baton_rooms", nil), "stopped rooms stay in the table for a minute")
	assert.EqualValues(t, 2*3, value(stopped, "baton_rooms_inputs_total", nil)+value(stopped, "baton_rooms_inputs_dropped_total", nil),
		"each of the 3 POSTs queued or dropped 2 inputs")
}
