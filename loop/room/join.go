package room

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// joinAnswer is Join's answer (JSON: room, node, addr, token, seat): where the player goes
// to take a seat in the room.
type joinAnswer struct {
	Room string `json:"room"`
	// Node and Addr are the room's owner (its ID and public address), or the node placement
	// chose for a room nobody owns yet (Token 0): that node claims the room when the player
	// arrives (Admit).
	Node  string          `json:"node"`
	Addr  string          `json:"addr"`
	Token directory.Token `json:"token,omitempty"`
	// Seat is the seat token to present at Addr (the query parameter "seat"); empty when
	// the node has no signer (NodeConfig.Seats).
	Seat string `json:"seat,omitempty"`
}

// Join answers c, a request to create or find the room named room for player, on any node
// of the cluster: 200 with a JSON object {"room", "node", "addr", "token", "seat"} naming
// the room's owner (its ID, public address and the room's token) or, for a room nobody
// owns (no token), the node placement chooses (the live node with the most headroom by
// load, never a draining one, directory.Choose; the choice's figures go to the stats
// section "cluster"), and a seat token for the player to present there (Admit). 400 for an invalid room name, 503 with
// Retry-After when the directory cannot be reached or no node can take the room. It parks
// c's task for the directory's round trips. The handler's task only.
func Join(c *loop.Ctx, room, player string) {
	n := nodeOf(c.Loop().Server())
	if err := directory.CheckRoom(room); err != nil {
		c.String(400, "400 Bad Request: room: "+err.Error()+"\n")
		return
	}
	d := n.handle()
	if d == nil {
		unavailable(c, "this node holds no directory lease")
		return
	}
	a, err := offload.Do(c, func(ctx context.Context) (joinAnswer, error) {
		cl, err := d.Lookup(ctx, room)
		if err == nil {
			return joinAnswer{Room: room, Node: cl.Node, Addr: cl.PublicAddr, Token: cl.Token}, nil
		}
		if !errors.Is(err, directory.ErrNotClaimed) {
			return joinAnswer{}, err
		}
		p, err := d.Place(ctx)
		if err != nil {
			return joinAnswer{}, err
		}
		n.placement.Store(&p)
		return joinAnswer{Room: room, Node: p.Node.ID, Addr: p.Node.PublicAddr}, nil
	})
	if err != nil {
		n.fail("join", err)
		unavailable(c, err.Error())
		return
	}
	if n.seats != nil {
		if a.Seat, err = n.seats.Sign(room, player); err != nil {
			c.String(400, "400 Bad Request: "+err.Error()+"\n")
			return
		}
	}
	c.JSON(200, a)
}

// unavailable answers 503 with Retry-After: 1.
func unavailable(c *loop.Ctx, why string) {
	c.SetHeader("Retry-After", "1")
	c.String(503, "503 Service Unavailable: room directory: "+why+"\n")
}

// Admit seats a player arriving at this node for the room named name (the WebSocket
// upgrade, or any request that takes a seat), and reports whether it did; when it did not,
// it has answered c. It checks the seat token (the query parameter "seat", signed by
// NodeConfig.Seats, naming this room: 401 if missing, malformed, forged or expired), then
// finds the room on c's loop, or makes it with open (which calls New on the loop it is
// given), and waits for the room's claim. A room another node owns gets 307 to the owner's
// public address (Location, same path and query): the player never lands in a twin. 503
// with Retry-After when the directory cannot be reached. The seat names the player.
//
// A seat naming a player makes c's task a member of the room holding the player's seat
// (docs/client-protocol.md): a new seat, or the seat held for the player after a dropped
// connection or a move, or a live one whose older connection is then cancelled (the
// newest connection wins). Instead of a seat token the request may carry a resume token
// (the query parameter "resume", from the hello Play sends): it takes back the seat it
// names in a room running here, once (401 if forged, for another room, used already, or
// its seat is gone; 307 if another node runs the room). Play then serves the connection.
// The handler's task only (loop mode: rooms are loop-confined).
func Admit[I any](c *loop.Ctx, name string, open func(l *loop.Loop) (*Room[I], error)) (*Room[I], directory.Seat, bool) {
	l := c.Loop()
	n := nodeOf(l.Server())
	var seat directory.Seat
	var nonce uint64
	resume := c.Query("resume") != ""
	if resume {
		room, player, nc, err := verifyResume(n.rkey, c.Query("resume"))
		if err == nil && room != name {
			err = fmt.Errorf("%w: for room %s, not %s", errResumeToken, room, name)
		}
		if err != nil {
			n.sts.refused.Add(1)
			c.String(401, "401 Unauthorized: "+err.Error()+"\n")
			return nil, seat, false
		}
		seat, nonce = directory.Seat{Room: room, Player: player}, nc
	} else if n.seats != nil {
		var err error
		if seat, err = n.seats.Verify(c.Query("seat")); err != nil {
			c.String(401, "401 Unauthorized: "+err.Error()+"\n")
			return nil, seat, false
		}
		if seat.Room != name {
			c.String(401, "401 Unauthorized: the seat token is for room "+seat.Room+", not "+name+"\n")
			return nil, seat, false
		}
	}
	var r *Room[I]
	if cr := tableOf(l).byName[name]; cr != nil && !cr.stopping && !cr.ended {
		var ok bool
		if r, ok = cr.self.(*Room[I]); !ok {
			c.String(500, "500 Internal Server Error: room "+name+" has another input type\n")
			return nil, seat, false
		}
	} else if resume {
		resumeElsewhere(c, n, name)
		return nil, seat, false
	} else {
		var err error
		if r, err = open(l); err != nil {
			if !Error(c, err) {
				c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
			}
			return nil, seat, false
		}
	}
	_, err := r.Claimed(c)
	var owned *directory.OwnedError
	switch {
	case err == nil && fencing && r.core.dir != nil && !r.core.owned():
		// Its lease lapsed: the room stops at its next tick, and the player asks again.
		unavailable(c, "room "+name+": this node's ownership lapsed")
	case err == nil:
		if seat.Player == "" {
			return r, seat, true
		}
		if _, err := r.core.sit(&c.Task, seat.Player, resume, nonce); err != nil {
			if resume && !errors.Is(err, ErrRoomStopped) {
				n.sts.refused.Add(1)
				c.String(401, "401 Unauthorized: "+err.Error()+"\n")
			} else if !Error(c, err) {
				c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
			}
			return nil, seat, false
		}
		return r, seat, true
	case errors.As(err, &owned) && owned.Owner.Node != n.cfg.Node:
		redirect(c, name, owned.Owner)
	case errors.Is(err, directory.ErrUnavailable), errors.Is(err, directory.ErrAlreadyOwned):
		unavailable(c, err.Error())
	default:
		if !Error(c, err) {
			c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
		}
	}
	return nil, seat, false
}

// redirect answers 307 to the owner's public address, same path and query.
func redirect(c *loop.Ctx, name string, owner directory.Claim) {
	u := url.URL{Scheme: "http", Host: owner.PublicAddr, Path: c.Path(), RawQuery: c.RawQuery()}
	c.SetHeader("Location", u.String())
	c.String(307, "307 Temporary Redirect: room "+name+" is on node "+owner.Node+" at "+owner.PublicAddr+"\n")
}

// resumeElsewhere answers a resume for a room that does not run here: 307 to the node
// that runs it, or 401 when none does (its seats went with it). The handler's task.
func resumeElsewhere(c *loop.Ctx, n *node, name string) {
	if d := n.handle(); d != nil && !n.local {
		cl, err := offload.Do(c, func(ctx context.Context) (directory.Claim, error) { return d.Lookup(ctx, name) })
		switch {
		case err == nil && cl.Node != n.cfg.Node:
			redirect(c, name, cl)
			return
		case err != nil && !errors.Is(err, directory.ErrNotClaimed):
			unavailable(c, err.Error())
			return
		}
	}
	n.sts.refused.Add(1)
	c.String(401, "401 Unauthorized: "+errSeatGone.Error()+"\n")
}
