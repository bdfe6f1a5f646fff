// baton.mjs: a browser client for baton's client protocol (docs/client-protocol.md).
//
// It joins a room through any node's join endpoint, opens the WebSocket at the node that
// runs the room, numbers the player's inputs and keeps each until the room acks it,
// resends after a "retry" answer, and resumes the same seat with the single-use resume
// token: after a dropped connection (at the same node) and after a move (close 4001, at
// the node its reason names). A plain ES module without dependencies: import it from a
// page (<script type="module">) or any runtime with fetch and WebSocket.
//
//   import { RoomClient } from "/baton.mjs";
//   const c = new RoomClient({ room: "lobby", player: "ann", params: { name: "Ann" } });
//   c.addEventListener("joined", (e) => console.log("seated on", e.detail.node));
//   c.addEventListener("message", (e) => draw(e.detail));   // the game's own messages
//   c.start();
//   c.send({ dx: 1, dy: 0 });                                // numbered, resent until acked
//
// Events (CustomEvent, the payload in detail): "joined" (the hello, on every connection),
// "message" (a game message), "ack" ({seq}), "refused" ({seq, error}), "moved" (the close
// reason {room, node, addr}), "dropped" ({code, reason}), "status" (a line for people),
// "closed" ({code, reason}: the client stopped: the room ended, another connection took
// the seat, or joining failed for good).

const RETRY_JOIN = 10; // joins tried in a row before the client gives up (about 15 s)

// backoff is the wait before try n+1: 250 ms, doubling, at most 2 s.
const backoff = (n) => Math.min(250 * 2 ** n, 2000);

// A connection not open within OPEN_TIMEOUT ms is abandoned and made again at once, up to
// OPEN_TRIES tries (the last waits as long as the browser does): a process replaced on the
// same port drops new SYNs for about 100 ms as it drains, and the kernel would retransmit a
// dropped SYN only after a second (docs/client-protocol.md, 2.).
const OPEN_TIMEOUT = 250;
const OPEN_TRIES = 3;

export class RoomClient extends EventTarget {
  // opts: room (required), player (required: the id the join endpoint seats), join (the
  // base URL of a node's join endpoint, default this page's origin), params (more query
  // parameters for the WebSocket, e.g. {name}), hold (ms to keep resuming after a drop;
  // the server's Config.Reconnect, 30 s by default), secure (wss:; default: as the page).
  constructor(opts) {
    super();
    if (!opts || !opts.room || !opts.player) throw new Error("baton: RoomClient needs room and player");
    this.room = opts.room;
    this.player = opts.player;
    this.join = opts.join || (typeof location !== "undefined" ? location.origin : "");
    this.params = opts.params || {};
    this.hold = opts.hold ?? 30000;
    this.secure = opts.secure ?? (typeof location !== "undefined" && location.protocol === "https:");
    this.hello = null;     // the latest hello
    this.resume = "";      // the latest resume token (single use)
    this.addr = "";        // the node the seat is on
    this.seq = 0;          // the last input number given
    this.acked = 0;        // the last input number the room took
    this.pending = [];     // [{seq, input}] sent or to send, not yet acked
    this.stats = { resumes: 0, moves: 0, retries: 0, resent: 0, drops: 0 };
    this.ws = null;
    this.stopped = false;
    this._ready = false;   // the current socket's hello arrived
    this._resendTimer = null;
    this._reconnectTimer = null;
    this._droppedAt = 0;
  }

  // start joins the room and connects.
  start() { this.stopped = false; this._join(0); }

  // send numbers input, keeps it until acked and sends it now if it can; returns its seq.
  send(input) {
    const p = { seq: ++this.seq, input };
    this.pending.push(p);
    if (this._ready && !this._resendTimer) this._write(p);
    return p.seq;
  }

  // close stops the client: no resume.
  close() {
    this.stopped = true;
    clearTimeout(this._resendTimer); clearTimeout(this._reconnectTimer);
    this._resendTimer = this._reconnectTimer = null;
    if (this.ws) { const w = this.ws; this.ws = null; w.close(1000, "bye"); }
  }

  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }
  _status(s) { this._emit("status", s); }

  // _join asks the join endpoint where the room is, then connects there: with the resume
  // token if there is one (the seat may be held), else (or if that fails) the seat.
  async _join(tries) {
    if (this.stopped) return;
    if (tries >= RETRY_JOIN) { this._stop(0, "could not join"); return; }
    this._status(`joining room ${this.room}`);
    let a;
    try {
      const r = await fetch(`${this.join}/join/${encodeURIComponent(this.room)}?player=${encodeURIComponent(this.player)}`);
      if (r.status === 400) { this._stop(0, (await r.text()).trim()); return; }
      if (!r.ok) throw new Error((await r.text()).trim());
      a = await r.json();
    } catch (e) {
      this._status(`join: ${e.message}; trying again`);
      this._later(() => this._join(tries + 1), backoff(tries));
      return;
    }
    if (this.stopped) return;
    const seat = `seat=${encodeURIComponent(a.seat || "")}`;
    const again = () => this._later(() => this._join(tries + 1), backoff(tries));
    if (this.resume) {
      this._connect(a.addr, `resume=${encodeURIComponent(this.resume)}`, () => this._connect(a.addr, seat, again));
    } else {
      this._connect(a.addr, seat, again);
    }
  }

  // _resume reconnects to addr with the resume token, backing off while the seat may be
  // held; past the hold, or when refused, it joins again.
  _resume(addr, attempt) {
    if (this.stopped) return;
    if (!this.resume || Date.now() - this._droppedAt > this.hold) { this._join(0); return; }
    this._connect(addr, `resume=${encodeURIComponent(this.resume)}`, () => {
      // Refused (the seat is gone or the token spent) or the node is unreachable: a few
      // tries, then ask where the room is.
      if (attempt >= 2) { this._join(0); return; }
      this._later(() => this._resume(addr, attempt + 1), backoff(attempt));
    });
  }

  _later(fn, ms) { clearTimeout(this._reconnectTimer); this._reconnectTimer = setTimeout(fn, ms); }

  // _connect opens the WebSocket at addr with query q; failed runs if it closes before
  // the hello (a refused upgrade: a browser cannot read its status). try_ is the attempt's
  // number: the first OPEN_TRIES-1 are abandoned if not open within OPEN_TIMEOUT.
  _connect(addr, q, failed, try_ = 1) {
    if (this.stopped) return;
    const extra = Object.entries(this.params).map(([k, v]) => `&${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("");
    const sock = new WebSocket(`${this.secure ? "wss" : "ws"}://${addr}/play/${encodeURIComponent(this.room)}?${q}${extra}`);
    this.ws = sock;
    this._ready = false;
    if (try_ < OPEN_TRIES) {
      const slow = setTimeout(() => {
        if (this.ws !== sock || sock.readyState !== WebSocket.CONNECTING) return;
        this.ws = null; // its close event is ignored from now on
        sock.close();
        this._connect(addr, q, failed, try_ + 1);
      }, OPEN_TIMEOUT);
      sock.addEventListener("open", () => clearTimeout(slow));
      sock.addEventListener("close", () => clearTimeout(slow));
    }
    sock.onmessage = (ev) => {
      if (this.ws !== sock) return;
      let m;
      try { m = JSON.parse(ev.data); } catch { return; }
      if (!this._ready) {
        if (m.type !== "joined") return;
        this._hello(addr, m);
        return;
      }
      switch (m.type) {
        case "ack": this._ack(m.seq); break;
        case "retry": this._retry(m); break;
        case "refused":
          this.pending = this.pending.filter((p) => p.seq !== m.seq);
          this._emit("refused", { seq: m.seq, error: m.error });
          break;
        default: this._emit("message", m);
      }
    };
    sock.onclose = (ev) => {
      if (this.ws !== sock) return;
      this.ws = null;
      const ready = this._ready;
      this._ready = false;
      clearTimeout(this._resendTimer); this._resendTimer = null;
      if (this.stopped) return;
      if (!ready) { failed(); return; }
      switch (ev.code) {
        case 1000: case 1008: case 4002: this._stop(ev.code, ev.reason); return;
        case 4001: {
          let where = { room: this.room };
          try { const w = JSON.parse(ev.reason); if (w && typeof w === "object") where = w; } catch { /* a room name */ }
          this.stats.moves++;
          this._emit("moved", where);
          this._status(`room moved${where.node ? " to " + where.node : ""}; resuming`);
          this._droppedAt = Date.now();
          if (where.addr) this._resume(where.addr, 0);
          else this._join(0);
          return;
        }
        default:
          this.stats.drops++;
          this._droppedAt = Date.now();
          this._emit("dropped", { code: ev.code, reason: ev.reason });
          this._status(`connection lost (${ev.code}); resuming`);
          // 1001: the node is draining (it refuses new connections); its rooms are being
          // handed to other nodes: ask where the room is. Otherwise: back to the same node.
          if (ev.code === 1001) this._later(() => this._join(0), 250);
          else this._later(() => this._resume(addr, 0), 250);
      }
    };
  }

  // _hello takes the server's first message: the seat, its resume token, and which inputs
  // the room has (ack); the others are resent in order.
  _hello(addr, h) {
    this._ready = true;
    this.hello = h;
    this.addr = addr;
    this.resume = h.resume || "";
    if (h.resumed) {
      this.stats.resumes++;
      this._ack(h.ack || 0);
    } else {
      // A new seat numbers its inputs from 1: renumber what is waiting.
      this.acked = 0;
      this.pending.forEach((p, i) => { p.seq = i + 1; });
      this.seq = this.pending.length;
    }
    this._status(`playing on node ${h.node}`);
    this._emit("joined", h);
    this._resendAll();
  }

  _ack(seq) {
    if (seq <= this.acked && this.pending.length === 0) return;
    this.acked = Math.max(this.acked, seq);
    let n = 0;
    while (n < this.pending.length && this.pending[n].seq <= this.acked) n++;
    if (n) this.pending.splice(0, n);
    this._emit("ack", { seq: this.acked });
  }

  // _retry: an input was not taken but may be resent. Only the answer to the first one
  // not taken schedules the resend (of everything after ack, in order); the others are
  // covered by it.
  _retry(m) {
    this.stats.retries++;
    this._ack(m.ack || 0);
    if (m.seq !== (m.ack || 0) + 1 || this._resendTimer) return;
    this._resendTimer = setTimeout(() => { this._resendTimer = null; this._resendAll(); }, Math.max(m.after_ms || 0, 10));
  }

  _resendAll() {
    if (!this._ready) return;
    for (const p of this.pending) this._write(p);
    this.stats.resent += this.pending.length;
  }

  _write(p) {
    if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify({ type: "input", seq: p.seq, input: p.input }));
  }

  _stop(code, reason) {
    this.stopped = true;
    clearTimeout(this._resendTimer); clearTimeout(this._reconnectTimer);
    this._status(`closed${code ? " (" + code + ")" : ""}${reason ? ": " + reason : ""}`);
    this._emit("closed", { code, reason });
  }
}
