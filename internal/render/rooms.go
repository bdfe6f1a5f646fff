package render

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/batonrt/baton/accounting"
)

// JSON documents of the rooms page. Field names and units are defined in docs/rooms.md.
type (
	roomsDoc struct {
		Total int       `json:"rooms_total"`
		Rooms []roomDoc `json:"rooms"`
		Other *roomDoc  `json:"other"`
	}

	roomDoc struct {
		Name         string             `json:"name"`
		State        string             `json:"state,omitempty"`
		Rooms        int                `json:"rooms"`
		Age          float64            `json:"age_seconds,omitempty"`
		Period       float64            `json:"period_seconds,omitempty"`
		Budget       float64            `json:"budget_seconds,omitempty"`
		Ticks        uint64             `json:"ticks"`
		Overruns     uint64             `json:"overruns"`
		Skipped      uint64             `json:"skipped"`
		CaughtUp     uint64             `json:"caught_up"`
		Panics       uint64             `json:"panics"`
		TickDuration accounting.Summary `json:"tick_duration"`
		TickWall     wallDoc            `json:"tick_wall"`
		TickLateness accounting.Summary `json:"tick_lateness"`
		Share1s      float64            `json:"loop_share_1s"`
		Share10s     float64            `json:"loop_share_10s"`
		Share60s     float64            `json:"loop_share_60s"`
		LoopTime     float64            `json:"loop_seconds"`
		Inputs       uint64             `json:"inputs"`
		Dropped      uint64             `json:"inputs_dropped"`
		Refused      uint64             `json:"inputs_refused"`
		Queued       int                `json:"inputs_queued"`
		Members      int                `json:"members"`
	}
	// wallDoc is a tick's wall time: count, mean and max (no percentiles are kept).
	wallDoc struct {
		Count uint64  `json:"count"`
		Mean  float64 `json:"mean_seconds"`
		Max   float64 `json:"max_seconds"`
	}
)

func roomJSON(r *accounting.RoomSnapshot) roomDoc {
	return roomDoc{
		Name: r.Name, State: r.State, Rooms: r.Rooms, Age: r.Age.Seconds(), Period: r.Period.Seconds(),
		Budget: r.Budget.Seconds(), Ticks: r.Ticks, Overruns: r.Overruns, Skipped: r.Skipped,
		CaughtUp: r.CaughtUp, Panics: r.Panics,
		TickDuration: r.TickDuration, TickLateness: r.TickLateness,
		TickWall: wallDoc{Count: r.TickWall.Count, Mean: r.TickWall.Mean().Seconds(), Max: r.TickWall.Max.Seconds()},
		Share1s:  r.Share[0], Share10s: r.Share[1], Share60s: r.Share[2], LoopTime: r.LoopTime.Seconds(),
		Inputs: r.Inputs, Dropped: r.Dropped, Refused: r.Refused, Queued: r.Queued, Members: r.Members,
	}
}

// WriteRoomsJSON writes the rooms page (a rooms section, package loop/room) as JSON. Any
// goroutine.
func WriteRoomsJSON(w io.Writer, s accounting.RoomsSnapshot) error {
	doc := roomsDoc{Total: s.Total, Rooms: make([]roomDoc, len(s.Rooms))}
	for i := range s.Rooms {
		doc.Rooms[i] = roomJSON(&s.Rooms[i])
	}
	if s.Other != nil {
		o := roomJSON(s.Other)
		doc.Other = &o
	}
	return writeJSON(w, doc)
}

// roomColumns are the columns of the rooms text view; times in milliseconds.
const roomColumns = "SHARE_1S\tSHARE_10S\tSHARE_60S\tTICKS\tOVERRUN\tSKIPPED\tCAUGHT_UP\tPANICS\tTICK_P50\tTICK_P99\tTICK_MAX\tWALL_MAX\tLATE_P50\tLATE_P99\tLATE_MAX\tINPUTS\tDROPPED\tREFUSED\tMEMBERS\tSTATE\tROOM"

// WriteRoomsText writes s as a text table, one line per listed room and one for the
// others (percentiles are not summed: "-"). Any goroutine.
func WriteRoomsText(w io.Writer, s accounting.RoomsSnapshot) error {
	t := &textWriter{bw: bufio.NewWriter(w)}
	t.printf("baton rooms: %d (top %d by 10 s loop share; times in ms)\n\n", s.Total, len(s.Rooms))
	pct := func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
	row := func(r *accounting.RoomSnapshot, full bool) []string {
		p := func(d time.Duration) string {
			if !full {
				return "-"
			}
			return ms(d)
		}
		name := r.Name
		if !full {
			name = fmt.Sprintf("(other: %d rooms)", r.Rooms)
		}
		return []string{
			pct(r.Share[0]), pct(r.Share[1]), pct(r.Share[2]), fmt.Sprint(r.Ticks), fmt.Sprint(r.Overruns),
			fmt.Sprint(r.Skipped), fmt.Sprint(r.CaughtUp), fmt.Sprint(r.Panics),
			p(r.TickDuration.P50), p(r.TickDuration.P99), ms(r.TickDuration.Max), ms(r.TickWall.Max),
			p(r.TickLateness.P50), p(r.TickLateness.P99), ms(r.TickLateness.Max),
			fmt.Sprint(r.Inputs), fmt.Sprint(r.Dropped), fmt.Sprint(r.Refused), fmt.Sprint(r.Members),
			r.State, name,
		}
	}
	rows := make([][]string, 0, len(s.Rooms)+1)
	for i := range s.Rooms {
		rows = append(rows, row(&s.Rooms[i], true))
	}
	if s.Other != nil {
		rows = append(rows, row(s.Other, false))
	}
	t.table(roomColumns, rows)
	return t.flush()
}
