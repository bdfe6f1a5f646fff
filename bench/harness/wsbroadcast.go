package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
	"github.com/batonrt/baton/bench/wsload"
)

// Sizes of the ws-broadcast scenario: the WebSocket issue's 5,000 connections in 50 rooms
// in the full suite, 1,000 in 10 rooms in the short one (-ws-conns overrides both; always
// 100 connections per room).
const (
	FullWSConns    = 5000
	QuickWSConns   = 1000
	WSConnsPerRoom = 100
)

func wsConns(p Params) int {
	switch {
	case p.WSConns > 0:
		return p.WSConns
	case p.Quick:
		return QuickWSConns
	}
	return FullWSConns
}

// WSExtra is extra.ws of a ws-broadcast run.
type WSExtra struct {
	Conns     int `json:"conns"`     // connections asked for
	Connected int `json:"connected"` // handshakes that succeeded
	Rooms     int `json:"rooms"`
	// ServerSent is the messages the server handed to connections in the window (its
	// /ws/stats, read at the window's edges); Delivered those the clients received.
	ServerSent uint64 `json:"server_sent"`
	Delivered  uint64 `json:"delivered"`
	// SlowClosed is the server's count of slow-consumer closes, over the whole run.
	SlowClosed uint64 `json:"slow_closed"`
	// ClientCPUPerMsgUs is the client's CPU µs per delivered message.
	ClientCPUPerMsgUs float64 `json:"client_cpu_per_msg_us"`
}

func init() {
	Register(&Scenario{
		Name:    "ws-broadcast",
		Summary: "5,000 WebSocket connections in 50 rooms; each room pushes a 200-byte state to its members at 20 Hz (100,000 messages/s)",
		Spec: `N WebSocket connections (5000 in the full suite, 1000 with -quick, or -ws-conns) connect
before the warm-up to GET /ws/room-K, 100 per room, and only read. Then POST /ws/start makes
every room send a 200-byte binary state message to all its members at 20 Hz, rooms staggered
over one period: N x 20 messages/s. The message starts with the server's send time (Unix
nanoseconds; client and server share the machine's clock) and the client records now - stamp
as the delivery latency. baton: the connections are upgraded on the loop (Ctx.Upgrade) and a
background task per room (Loop.Every) encodes the frame once (NewPrepared) and Broadcasts
it. net/http: gorilla/websocket, a writer goroutine per connection fed by a channel of 64
(a full channel closes the connection as a slow consumer, 1008), a broadcaster goroutine per
room on a time.Ticker, the frame encoded once per broadcast (gorilla's PreparedMessage). The
client (package wsload) is a goroutine per connection with a minimal frame reader; it runs on
the other core and its CPU is reported (cli cpu, extra.ws.client_cpu_per_msg_us) to show it
keeps up. Row delivery: req/s = delivered messages/s, latency = delivery latency, errors =
closes by code; srv µs/req is the server's CPU per delivered message. Goal: baton at most 0.5x
net/http's CPU per delivered message and a lower p99.`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, QuickDuration, FullWarmup, FullDuration)
			n := wsConns(p)
			rooms := max(1, (n+WSConnsPerRoom-1)/WSConnsPerRoom)
			return []Phase{{
				Name:        fmt.Sprintf("c%d", n),
				Description: fmt.Sprintf("%d connections in %d rooms, %d-byte messages at 20 Hz", n, rooms, servers.WSPayload),
				Warmup:      warm, Duration: dur,
				Custom: func(ctx context.Context, env *Env) (*Figures, error) { return wsDriver(ctx, env, n, rooms) },
			}}
		},
		Summarize: wsSummary,
	})
}

// wsDriver connects the fleet, starts the broadcasts, and measures a window.
func wsDriver(ctx context.Context, env *Env, conns, rooms int) (*Figures, error) {
	fleet, err := wsload.Dial(ctx, wsload.Config{
		Addr: env.Host, Conns: conns,
		Path: func(i int) string { return fmt.Sprintf("%s/ws/room-%d", env.Prefix, i%rooms) },
	})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	if fleet.Connected() == 0 {
		fleet.Close()
		return nil, fmt.Errorf("no WebSocket connection succeeded: %v", fleet.Result().Errors)
	}
	// Wait until the server counts every connection in its rooms, so that the broadcasts
	// reach them all from the first.
	var st servers.WSStats
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := getJSON(ctx, env.Base()+"/ws/stats", &st); err != nil {
			return nil, err
		}
		if st.Conns >= fleet.Connected() {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the server counts %d of %d connections after 10 s", st.Conns, fleet.Connected())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if err := postJSON(ctx, env.Base()+"/ws/start", servers.WSStart{Rooms: rooms}); err != nil {
		return nil, err
	}
	if err := sleep(ctx, env.Warmup); err != nil {
		return nil, err
	}
	var s0, s1 servers.WSStats
	if err := getJSON(ctx, env.Base()+"/ws/stats", &s0); err != nil {
		return nil, err
	}
	fleet.MeasureStart()
	env.MeasureStart()
	if err := sleep(ctx, env.Duration); err != nil {
		return nil, err
	}
	env.MeasureEnd()
	fleet.MeasureEnd()
	if err := getJSON(ctx, env.Base()+"/ws/stats", &s1); err != nil {
		return nil, err
	}
	fleet.Close()
	res := fleet.Result()
	g := &loadgen.GroupResult{Name: "delivery", Conns: conns, Rate: float64(conns) * float64(time.Second/servers.WSPeriod),
		Duration: res.Window, Sent: s1.Sent - s0.Sent, Requests: res.Delivered, Latency: res.Latency, Errors: res.Errors}
	ex := WSExtra{Conns: conns, Connected: fleet.Connected(), Rooms: rooms, ServerSent: s1.Sent - s0.Sent,
		Delivered: res.Delivered, SlowClosed: s1.SlowClosed}
	if _, _, cpu, err := env.window(); err == nil && res.Delivered > 0 {
		ex.ClientCPUPerMsgUs = float64(cpu.Microseconds()) / float64(res.Delivered)
	}
	return &Figures{
		Groups: []*loadgen.GroupResult{g}, Modes: map[string]string{"delivery": "push"},
		Work: res.Delivered, Unit: "msg", Extra: map[string]any{"ws": ex},
	}, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func wsSummary(s *ScenarioResult) []SummaryItem {
	if len(s.Phases) == 0 {
		return nil
	}
	ph := s.Phases[0]
	var out []SummaryItem
	for _, r := range ph.Runs {
		if ex, ok := r.Extra["ws"].(WSExtra); ok && ex.Delivered > 0 {
			out = append(out, SummaryItem{Name: "ws-broadcast: " + r.Target + " client CPU per delivered message", Value: ex.ClientCPUPerMsgUs, Unit: "µs",
				Note: fmt.Sprintf("client at %.0f%% of its CPUs; delivered %d of %d sent; %d slow-consumer closes", 100*r.Client.Util, ex.Delivered, ex.ServerSent, ex.SlowClosed)})
		}
	}
	b, n := ph.Run(servers.Baton), ph.Run(servers.NetHTTP)
	if b != nil && n != nil && b.Server != nil && n.Server != nil && b.Server.CPUUsPerUnit > 0 && n.Server.CPUUsPerUnit > 0 {
		v := b.Server.CPUUsPerUnit / n.Server.CPUUsPerUnit
		ok := v <= 0.5
		out = append(out, SummaryItem{Name: "ws-broadcast: baton/nethttp server CPU per delivered message", Value: v, Unit: "x", Goal: "<= 0.5", Pass: &ok,
			Note: fmt.Sprintf("%.2f vs %.2f µs", b.Server.CPUUsPerUnit, n.Server.CPUUsPerUnit)})
	}
	out = append(out, floorRatios("ws-broadcast", ph, map[string]float64{servers.Baton: 1.15})...)
	bg, ng := b.Group("delivery"), n.Group("delivery")
	if bg != nil && ng != nil && bg.Latency.Count > 0 && ng.Latency.Count > 0 {
		v := float64(bg.Latency.P99) / float64(ng.Latency.P99)
		ok := v < 1
		out = append(out, SummaryItem{Name: "ws-broadcast: baton/nethttp delivery p99", Value: v, Unit: "x", Goal: "< 1", Pass: &ok,
			Note: fmt.Sprintf("%s vs %s", fmtUs(bg.Latency.P99), fmtUs(ng.Latency.P99))})
	}
	return out
}
