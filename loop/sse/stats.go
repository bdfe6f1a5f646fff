package sse

import (
	"fmt"
	"io"
	"net/url"
	"sort"

	"github.com/batonrt/baton/loop"
)

// Figures is the stats section "sse": one row per broker with clients on the loop (with
// several loops, the rows of every loop summed by broker). Plain data.
type Figures struct {
	Brokers []BrokerFigures `json:"brokers"`
}

// BrokerFigures is one broker's figures. Counters are since the server started.
type BrokerFigures struct {
	Name       string `json:"name"`
	Clients    int64  `json:"clients"`          // streams open now
	Served     int64  `json:"served_total"`     // streams opened
	Resumed    int64  `json:"resumed_total"`    // streams opened with Last-Event-ID
	Replayed   int64  `json:"replayed_total"`   // events sent from the history to resumed streams
	Gaps       int64  `json:"gaps_total"`       // resumes that asked for events no longer kept
	Events     int64  `json:"events_total"`     // events published (the broker's, whatever the loop)
	Sent       int64  `json:"sent_total"`       // events written to streams
	Heartbeats int64  `json:"heartbeats_total"` // comment lines sent on quiet streams
	Drained    int64  `json:"drained_total"`    // streams ended with the final event by a drain
}

type hubsKey struct{}

// addHub records h among loop l's hubs, for the stats section. Loop-confined.
func addHub(l *loop.Loop, h *hub) {
	hs := l.Value(hubsKey{}, func() any { return new([]*hub) }).(*[]*hub)
	*hs = append(*hs, h)
}

// hubsOf returns loop l's hubs. Loop-confined.
func hubsOf(l *loop.Loop) []*hub {
	if hs, ok := l.Value(hubsKey{}, nil).(*[]*hub); ok {
		return *hs
	}
	return nil
}

// Section is the brokers' stats section, added to a server with its first broker: the
// page prefix/sse, Snapshot.Sections["sse"] (a Figures) and a dashboard panel.
var Section = loop.StatsSection{
	Name: "sse",
	Take: func(l *loop.Loop, _ url.Values) (any, error) {
		hs := hubsOf(l)
		f := Figures{Brokers: make([]BrokerFigures, 0, len(hs))}
		for _, h := range hs {
			f.Brokers = append(f.Brokers, BrokerFigures{
				Name: h.b.cfg.Name, Clients: h.st.clients.Load(), Served: h.st.served.Load(),
				Resumed: h.st.resumed.Load(), Replayed: h.st.replayed.Load(), Gaps: h.st.gaps.Load(),
				Events: h.b.events.Load(), Sent: h.st.sent.Load(), Heartbeats: h.st.heartbeats.Load(),
				Drained: h.st.drained.Load(),
			})
		}
		return f, nil
	},
	Sum: func(per []any) any {
		by := map[string]*BrokerFigures{}
		var names []string
		for _, v := range per {
			for _, r := range v.(Figures).Brokers {
				t, ok := by[r.Name]
				if !ok {
					t = &BrokerFigures{Name: r.Name}
					by[r.Name] = t
					names = append(names, r.Name)
				}
				t.Clients += r.Clients
				t.Served += r.Served
				t.Resumed += r.Resumed
				t.Replayed += r.Replayed
				t.Gaps += r.Gaps
				t.Events = max(t.Events, r.Events) // the broker's own count, the same on every loop
				t.Sent += r.Sent
				t.Heartbeats += r.Heartbeats
				t.Drained += r.Drained
			}
		}
		sort.Strings(names)
		f := Figures{Brokers: make([]BrokerFigures, 0, len(names))}
		for _, n := range names {
			f.Brokers = append(f.Brokers, *by[n])
		}
		return f
	},
	Text: func(w io.Writer, v any) error {
		if _, err := fmt.Fprintf(w, "%-16s %8s %8s %8s %8s %10s %10s %10s %8s\n", "BROKER", "CLIENTS", "SERVED", "RESUMED", "GAPS", "EVENTS", "SENT", "HEARTBEATS", "DRAINED"); err != nil {
			return err
		}
		for _, r := range v.(Figures).Brokers {
			if _, err := fmt.Fprintf(w, "%-16s %8d %8d %8d %8d %10d %10d %10d %8d\n", r.Name, r.Clients, r.Served, r.Resumed, r.Gaps, r.Events, r.Sent, r.Heartbeats, r.Drained); err != nil {
				return err
			}
		}
		return nil
	},
	Panel: func(v any) any { return v.(Figures).Brokers },
}
