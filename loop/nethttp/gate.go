package nethttp

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// This file is the Adapter's gate: a place per running handler, a share per route, and
// the abandonment of handlers that outlive their request.

// routeGate returns route's share of the gate, making it on first use, or nil when routes
// are not capped (MaxRouteShare 1). Any goroutine.
func (a *Adapter) routeGate(route string) *offload.Gate {
	if a.routeCap == 0 {
		return nil
	}
	a.routeMu.Lock()
	defer a.routeMu.Unlock()
	g := a.routes[route]
	if g == nil {
		if a.routes == nil {
			a.routes = map[string]*offload.Gate{}
		}
		g = a.srv.NewGate("net/http "+route, a.routeCap, a.queue)
		a.routes[route] = g
	}
	return g
}

// place is a net/http handler's place in the gate and its route's share: given back
// once, when the handler returns or when it is abandoned. Safe for concurrent use.
type place struct {
	a      *Adapter
	route  string
	rg     *offload.Gate // nil: no route cap
	left   atomic.Bool
	aband  atomic.Bool // counted in Adapter.abandoned
	timer  atomic.Pointer[time.Timer]
	stopCh func() bool // stops the context.AfterFunc that arms the timer
}

// enter takes a place for c's net/http handler: first in its route's share, then in the
// gate, parking in each queue while full. It answers 503 itself when a queue is full and
// returns nil then, or when c was cancelled while waiting. On c's task or goroutine.
func (a *Adapter) enter(c *loop.Ctx) *place {
	p := &place{a: a, route: c.Route()}
	p.rg = a.routeGate(p.route)
	if p.rg != nil {
		if err := p.rg.Enter(c); err != nil {
			if errors.Is(err, offload.ErrQueueFull) {
				c.SetHeader("Retry-After", "1")
				c.String(503, "503 Service Unavailable: too many net/http handlers of this route\n")
			}
			return nil
		}
	}
	if err := a.gate.Enter(c); err != nil {
		if p.rg != nil {
			p.rg.Leave()
		}
		if errors.Is(err, offload.ErrQueueFull) {
			c.SetHeader("Retry-After", "1")
			c.String(503, "503 Service Unavailable: too many net/http handlers\n")
		}
		return nil
	}
	return p
}

// leave gives the places back and reports whether this call did. Any goroutine.
func (p *place) leave() bool {
	if !p.left.CompareAndSwap(false, true) {
		return false
	}
	p.a.gate.Leave()
	if p.rg != nil {
		p.rg.Leave()
	}
	return true
}

// watch arms the abandonment of the place: AbandonAfter once ctx (the request's) ends.
// Any goroutine.
func (p *place) watch(ctx context.Context) {
	if p.a.abandon < 0 {
		return
	}
	p.stopCh = context.AfterFunc(ctx, p.arm)
}

// arm starts the grace period. On a goroutine of its own (context.AfterFunc, time.AfterFunc).
func (p *place) arm() {
	if p.left.Load() {
		return
	}
	t := time.AfterFunc(p.a.abandon, p.expire)
	p.timer.Store(t)
	if p.left.Load() {
		t.Stop()
	}
}

// expire abandons the handler, unless it returned meanwhile or MaxConcurrent handlers are
// abandoned already (then it looks again after another grace period). On a timer's
// goroutine.
func (p *place) expire() {
	a := p.a
	if p.left.Load() {
		return
	}
	if a.abandoned.Add(1) > a.maxAband {
		a.abandoned.Add(-1)
		p.arm()
		return
	}
	if !p.leave() {
		a.abandoned.Add(-1)
		return
	}
	p.aband.Store(true)
	total := a.abandonTotal.Add(1)
	if ok, suppressed := a.abandonLog.allow(time.Now()); ok {
		a.log.Warn("nethttp: net/http handler still running after its request ended: abandoned, its place in the gate given back; it ignores its request's context",
			"route", p.route, "after", a.abandon, "abandoned_running", a.abandoned.Load(), "abandoned_total", total, "suppressed", suppressed)
	}
}

// done runs when the handler returned: the places go back (unless abandoned already).
// On the handler's goroutine.
func (p *place) done() {
	p.leave()
	if p.stopCh != nil {
		p.stopCh()
	}
	if t := p.timer.Load(); t != nil {
		t.Stop()
	}
	if p.aband.Load() {
		p.a.abandoned.Add(-1)
	}
}
