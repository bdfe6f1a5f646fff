package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonrt/baton/loop/room"
)

// playClient is the integration tests' Go client of docs/client-protocol.md (the
// counterpart of examples/gameserver/baton.mjs), used by the resume tests and by the bots
// of the handoff tests. It joins through any node (1.), connects with its seat (2.),
// takes the hello's resume token and ack (3.), numbers its inputs and keeps each until it
// is acked, resending everything after the ack a retry names once its after_ms has
// passed and sending nothing new meanwhile (4.); after a close 4001 it connects at once
// to the node the reason names with ?resume= (5.); after a drop it reconnects to the same
// node with ?resume=, backing off 250 ms doubling up to 2 s while the seat may be held
// (6.); after a 1001 it asks the join where the room is and presents the resume token
// there (7.). It joins again with a new seat only when the resume is refused (401) or the
// hold has passed, or after a 1000 (the room ended: the bot plays on in a new match of the
// same name); a 307 is followed, a 503 waited out. Each input is its own sequence number
// (the JSON number seq), so a room's state shows which inputs it took and in which order;
// a new seat renumbers what is waiting from 1.
//
// The fields above the line are its settings; run owns the rest (read them after run
// returns), except acked and seated, which any goroutine may read.
type playClient struct {
	room, player string
	nodes        func() []string // addresses of nodes to join through (one at random)
	every        time.Duration   // a new input every; 0: 100 ms
	window       uint64          // at most this many inputs unacked (0: no limit)
	total        uint64          // stop once this many are acked (0: play until stop)
	hold         time.Duration   // how long a dropped seat is held (the rooms' Config.Reconnect); 0: 30 s

	acked  atomic.Uint64 // the last input acked, on the current seat
	seated atomic.Bool   // has a connection past its hello now

	conn         *websocket.Conn
	msgs         chan any // the connection's messages (playAnswer), then its error
	addr, resume string   // the node of the seat; the latest resume token ("": none, or the seat is gone)
	seq          uint64   // the last input numbered
	pending      []uint64 // inputs numbered and not yet acked (or refused), in order
	sent         int64    // input messages sent, resends included
	retries      int      // retry answers
	frozen       int      // of which the room was freezing to move
	refused      int      // refused answers
	lost         uint64   // inputs acked, then not in the room: a seat lost, or a hello's ack below ours
	moved        []string // the nodes 4001 closes named
	wasResumed   bool     // the latest hello took a seat back
	backs        []clientBack
	refusals     map[string]int    // connection tries that failed, by what and status: "resume 503", "join 503", "seat 401"...
	refusedWhy   map[string]string // the first failure of each key of refusals, as the server said it
	problems     []string
}

// clientBack is one reconnection: why the connection ended, how long until the next
// hello, and how the client got there.
type clientBack struct {
	cause   string        // "4001", "1001", "1000" or "drop"
	took    time.Duration // from the end of the connection to the next hello
	resumed bool          // the hello took the seat back (else: a new seat)
	joined  bool          // a /join was asked on the way (the close named no node, or the resume there failed)
}

// contractBackoff is the contract's wait before try n+1: 250 ms, doubling, at most 2 s.
func contractBackoff(n int) time.Duration { return min(250*time.Millisecond<<min(n, 4), 2*time.Second) }

var contractDialer = websocket.Dialer{HandshakeTimeout: 5 * time.Second}

// openTimeout is the contract's bound on a connection's opening: past it the attempt is
// abandoned and made again at once (a SYN a draining listener dropped waits a second for
// the kernel's retransmission otherwise); openTries attempts, then the usual failure.
const (
	openTimeout = 250 * time.Millisecond
	openTries   = 3
)

// dialOpen dials url, abandoning an attempt that has not opened (TCP and upgrade) within
// openTimeout and trying again at once, up to openTries times.
func dialOpen(url string) (*websocket.Conn, *http.Response, error) {
	for try := 1; ; try++ {
		ctx, cancel := context.WithCancel(context.Background())
		if try < openTries { // the last try has the dialer's own bound
			ctx, cancel = context.WithTimeout(context.Background(), openTimeout)
		}
		conn, resp, err := contractDialer.DialContext(ctx, url, nil)
		cancel()
		var ne net.Error
		if err == nil || try == openTries || !(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
			return conn, resp, err
		}
		openRetries.Add(1)
	}
}

// openRetries counts the attempts dialOpen abandoned, for the tests' logs.
var openRetries atomic.Int64

// dialContract connects to /play/{room} at addr with query (seat=... or resume=...) and
// reads the hello. A refused upgrade returns its status and, for a 307, the Location's
// host; a socket that ends before the hello returns status 0.
func dialContract(addr, name, query string) (conn *websocket.Conn, h playHello, status int, location string, err error) {
	conn, resp, err := dialOpen("ws://" + addr + "/play/" + name + "?" + query)
	var body []byte
	if resp != nil && resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 256))
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			status = resp.StatusCode
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(body)))
			if u, perr := url.Parse(resp.Header.Get("Location")); perr == nil {
				location = u.Host
			}
		}
		return nil, h, status, location, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := conn.ReadJSON(&h); err != nil || h.Type != "joined" {
		conn.Close()
		return nil, h, 0, "", fmt.Errorf("hello: %v %+v", err, h)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, h, 101, "", nil
}

// sendInput sends input seq (its value is seq).
func (p *playClient) sendInput(seq uint64) error {
	p.sent++
	return sendSeqInput(p.conn, seq)
}

// ackTo drops the pending inputs up to seq.
func (p *playClient) ackTo(seq uint64) {
	if seq > p.acked.Load() {
		p.acked.Store(seq)
	}
	i := 0
	for i < len(p.pending) && p.pending[i] <= seq {
		i++
	}
	p.pending = p.pending[i:]
}

// hello takes a connection's first message: a resumed seat acks what the room has; a new
// seat (the old one is gone with whatever it had acked) renumbers what is waiting.
func (p *playClient) hello(conn *websocket.Conn, addr string, h playHello) {
	p.conn, p.addr, p.resume, p.wasResumed = conn, addr, h.Resume, h.Resumed
	if h.Resumed {
		if a := p.acked.Load(); h.Ack < a {
			p.lost += a - h.Ack
			p.problems = append(p.problems, fmt.Sprintf("resumed on %s with ack %d, below the %d acked", h.Node, h.Ack, a))
			p.acked.Store(h.Ack)
		}
		p.ackTo(h.Ack)
	} else {
		p.lost += p.acked.Load()
		p.acked.Store(0)
		for i := range p.pending {
			p.pending[i] = uint64(i + 1)
		}
		p.seq = uint64(len(p.pending))
	}
	p.seated.Store(true)
}

// refused1 counts a failed try: what was tried and the status (0: no answer, or the socket
// ended before the hello).
func (p *playClient) refused1(what string, status int, err error) {
	if p.refusals == nil {
		p.refusals, p.refusedWhy = map[string]int{}, map[string]string{}
	}
	k := what + " " + strconv.Itoa(status)
	p.refusals[k]++
	if _, ok := p.refusedWhy[k]; !ok && err != nil {
		p.refusedWhy[k] = err.Error()
	}
}

// joinStatus is the status of a failed join (0: no answer).
func joinStatus(err error) int {
	var s joinError
	if errors.As(err, &s) {
		return int(s)
	}
	return 0
}

// joinError is a join answered with another status than 200.
type joinError int

func (e joinError) Error() string { return "join: " + strconv.Itoa(int(e)) }

// join asks a node where the room is: the address and a seat token, or how long to wait.
func (p *playClient) join(hc *http.Client) (addr, seat string, wait time.Duration, err error) {
	nodes := p.nodes()
	if len(nodes) == 0 {
		return "", "", 0, errors.New("no node to join through")
	}
	res, err := hc.Get("http://" + nodes[rand.IntN(len(nodes))] + "/join/" + url.PathEscape(p.room) + "?player=" + url.QueryEscape(p.player))
	if err != nil {
		return "", "", 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		s, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		return "", "", time.Duration(s) * time.Second, joinError(res.StatusCode)
	}
	var a joinAnswer
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil {
		return "", "", 0, err
	}
	return a.Addr, a.Seat, 0, nil
}

// reconnect gets the client seated again: resuming at addr first if resumeAt (the
// contract's 5. and 6.), through the join otherwise or when that fails. It returns
// whether a join was asked, or an error once giveUp says so.
func (p *playClient) reconnect(hc *http.Client, addr string, resumeAt bool, since time.Time, giveUp func() bool) (bool, error) {
	hold := p.hold
	if hold == 0 {
		hold = 30 * time.Second
	}
	joined := false
	tries := 0
	for {
		if giveUp() {
			return joined, errors.New("gave up")
		}
		if resumeAt && (p.resume == "" || time.Since(since) > hold) {
			resumeAt = false
		}
		if resumeAt {
			conn, h, status, loc, err := dialContract(addr, p.room, "resume="+url.QueryEscape(p.resume))
			if conn == nil {
				p.refused1("resume", status, err)
			}
			switch {
			case conn != nil:
				p.hello(conn, addr, h)
				return joined, nil
			case status == 401: // the seat is gone: join again, with a new seat
				p.resume, resumeAt = "", false
			case status == 307 && loc != "" && tries < 3: // the room runs there
				addr = loc
				tries++
			case tries >= 2: // unreachable, draining, refused before the hello: ask where the room is
				resumeAt, tries = false, 0
			default:
				time.Sleep(contractBackoff(tries))
				tries++
			}
			continue
		}
		joined = true
		at, seat, wait, err := p.join(hc)
		switch {
		case err != nil:
			p.refused1("join", joinStatus(err), err)
		case p.resume != "": // the seat may be held where the room is: the token first
			conn, h, status, _, err := dialContract(at, p.room, "resume="+url.QueryEscape(p.resume))
			if conn != nil {
				p.hello(conn, at, h)
				return joined, nil
			}
			p.refused1("resume", status, err)
			if status != 401 { // not refused (307, 503, unreachable): wait, join again
				break
			}
			p.resume = "" // the seat is gone: a new seat, with the join's token
			fallthrough
		default:
			conn, h, status, _, err := dialContract(at, p.room, "seat="+url.QueryEscape(seat))
			if conn != nil {
				p.hello(conn, at, h)
				return joined, nil
			}
			p.refused1("seat", status, err)
		}
		time.Sleep(max(wait, contractBackoff(tries)/2+rand.N(contractBackoff(tries)/2)))
		tries++
	}
}

// run plays: until total inputs are acked, or until stop is closed and then every input
// numbered is acked (at most 10 s more). The connection stays open (close ends it).
// Problems go to p.problems.
func (p *playClient) run(stop <-chan struct{}) {
	hc := &http.Client{Timeout: 5 * time.Second}
	every := p.every
	if every == 0 {
		every = 100 * time.Millisecond
	}
	var finishBy time.Time // set once stop is closed
	stopping := func() bool {
		if finishBy.IsZero() {
			select {
			case <-stop:
				finishBy = time.Now().Add(10 * time.Second)
			default:
			}
		}
		return !finishBy.IsZero()
	}
	// giveUp: stopped, and nothing left to get acked (or no more time for it).
	giveUp := func() bool {
		return stopping() && (len(p.pending) == 0 || time.Now().After(finishBy))
	}
	defer func() {
		if len(p.pending) > 0 {
			p.problems = append(p.problems, fmt.Sprintf("ended with %d inputs unacked (acked %d)", len(p.pending), p.acked.Load()))
		}
	}()
	if _, err := p.reconnect(hc, "", false, time.Now(), giveUp); err != nil {
		return
	}
	for {
		err := p.session(every, stopping, giveUp)
		if err == nil {
			return
		}
		p.seated.Store(false)
		ended := time.Now()
		b := clientBack{cause: "drop"}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			switch ce.Code {
			case room.CloseMoved:
				b.cause = "4001"
			case 1000, 1001:
				b.cause = strconv.Itoa(ce.Code)
			case 4002, 1008:
				p.problems = append(p.problems, fmt.Sprintf("closed with %d %q", ce.Code, ce.Text))
				return
			}
		}
		addr, resumeAt := p.addr, false
		switch b.cause {
		case "4001": // the room moved: resume at once where the reason says
			var where struct{ Room, Node, Addr string }
			if json.Unmarshal([]byte(ce.Text), &where) == nil {
				p.moved = append(p.moved, where.Node)
				addr, resumeAt = where.Addr, where.Addr != ""
			}
		case "1000": // the room ended: a new match, a new seat
			p.resume = ""
		case "1001": // the node drains: ask where the room is, after a while
			time.Sleep(contractBackoff(0))
		default: // a drop: back to the same node, after a while
			time.Sleep(contractBackoff(0))
			resumeAt = true
		}
		joined, err := p.reconnect(hc, addr, resumeAt, ended, giveUp)
		if err != nil {
			return
		}
		b.took, b.joined = time.Since(ended), joined
		b.resumed = p.wasResumed
		p.backs = append(p.backs, b)
	}
}

// close ends the client's connection, if it has one, with 1000 (the player leaves: the
// room is told, and the seat is held for a resume). After run returned.
func (p *playClient) close() {
	if p.conn == nil || !p.seated.Load() {
		return
	}
	p.seated.Store(false)
	_ = p.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(time.Second))
	p.conn.Close()
	for range p.msgs {
	}
}

// session plays on the current connection until it ends (its error) or the client is
// done (nil: total acked, or giveUp after stop), then closes it.
func (p *playClient) session(every time.Duration, stopping, giveUp func() bool) error {
	conn := p.conn
	msgs := make(chan any, 256) // playAnswer, then the connection's error
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				msgs <- err
				close(msgs)
				return
			}
			var a playAnswer
			if json.Unmarshal(data, &a) != nil {
				a = playAnswer{Type: "not JSON: " + string(data)}
			}
			msgs <- a
		}
	}()
	p.msgs = msgs
	done := false // the connection stays open for close
	defer func() {
		if !done {
			conn.Close()
			for range msgs {
			}
		}
	}()
	for _, s := range p.pending { // everything after the hello's ack, in order
		if p.sendInput(s) != nil {
			break
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var resend <-chan time.Time // set while a retry's after_ms runs
	for {
		if (p.total > 0 && p.acked.Load() >= p.total) || giveUp() {
			done = true
			return nil
		}
		select {
		case m := <-msgs:
			switch m := m.(type) {
			case error:
				return m
			case playAnswer:
				switch m.Type {
				case "ack":
					p.ackTo(m.Seq)
				case "retry":
					p.retries++
					if strings.Contains(m.Error, room.ErrHandingOff.Error()) {
						p.frozen++
					}
					p.ackTo(m.Ack)
					// Only the answer to the first input not taken schedules the resend of
					// everything after ack; the others are covered by it.
					if m.Seq == m.Ack+1 && resend == nil {
						resend = time.After(time.Duration(m.AfterMs) * time.Millisecond)
					}
				case "refused":
					p.refused++
					if i := slices.Index(p.pending, m.Seq); i >= 0 {
						p.pending = slices.Delete(p.pending, i, i+1)
					}
				case "error":
					p.problems = append(p.problems, "error answer: "+m.Error)
				default: // the game's own messages
					if strings.HasPrefix(m.Type, "not JSON") {
						p.problems = append(p.problems, m.Type)
					}
				}
			}
		case <-resend:
			resend = nil
			for _, s := range p.pending {
				if p.sendInput(s) != nil {
					break
				}
			}
		case <-tick.C:
			if resend != nil || stopping() || (p.total > 0 && p.seq >= p.total) ||
				(p.window > 0 && uint64(len(p.pending)) >= p.window) {
				continue
			}
			p.seq++
			p.pending = append(p.pending, p.seq)
			_ = p.sendInput(p.seq) // an error: the connection is ending, its end comes through msgs
		}
	}
}
