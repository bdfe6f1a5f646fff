package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// created is a ticket as its creator reads it: POST /tickets's 201, or /ws's first message.
type created struct {
	ID        string `json:"id"`
	Player    string `json:"player"`
	Name      string `json:"name"`
	State     string `json:"state"`
	Match     string `json:"match"`
	Secret    string `json:"secret"`
	PlayerKey string `json:"player_key"`
}

// call makes a request with optional headers and returns the status and body.
func call(t *testing.T, method, u string, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// newTicketAs queues a ticket over HTTP and returns the status and the creator's answer.
func newTicketAs(t *testing.T, s *server, player, name, key string) (int, created) {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["X-Player-Key"] = key
	}
	code, body := call(t, "POST", s.url("/tickets?player="+player+"&name="+url.QueryEscape(name)), "", hdr)
	var c created
	if code == 201 {
		require.NoError(t, json.Unmarshal([]byte(body), &c), body)
	}
	return code, c
}

func bearer(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// profileName reads GET /players/{id}'s name.
func profileName(t *testing.T, s *server, id string) string {
	t.Helper()
	var p struct {
		Name string `json:"name"`
	}
	require.Equal(t, 200, getJSON(t, s.url("/players/"+id), &p))
	return p.Name
}

// ticketState reads GET /tickets/{id}'s state.
func ticketState(t *testing.T, s *server, id string) string {
	t.Helper()
	var tk created
	require.Equal(t, 200, getJSON(t, s.url("/tickets/"+id), &tk))
	return tk.State
}

// position finds a player in a snapshot.
func position(t *testing.T, st snapshot, id string) [2]float64 {
	t.Helper()
	for _, p := range st.Players {
		if p.ID == id {
			return [2]float64{p.X, p.Y}
		}
	}
	t.Fatalf("player %s is not in the snapshot", id)
	return [2]float64{}
}

// TestTicketsCarryASecretForTheirCreatorOnly: a ticket's id is not a counter, its secret
// and the player key come in the creator's answer only, never in GET /tickets/{id}.
func TestTicketsCarryASecretForTheirCreatorOnly(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Wait = time.Hour
	s := start(t, opts)
	code, a := newTicketAs(t, s, "alice", "Alice", "")
	require.Equal(t, 201, code)
	code, b := newTicketAs(t, s, "bob", "Bob", "")
	require.Equal(t, 201, code)
	assert.GreaterOrEqual(t, len(a.Secret), 40, "a 256-bit secret")
	assert.NotEmpty(t, a.PlayerKey, "a new player id gets its key")
	assert.NotEqual(t, a.Secret, b.Secret)
	assert.NotEqual(t, "t1", a.ID)
	assert.GreaterOrEqual(t, len(a.ID), 20, "a random id, not a counter")
	_, body := call(t, "GET", s.url("/tickets/"+a.ID), "", nil)
	assert.NotContains(t, body, a.Secret, "GET /tickets/{id} does not show the secret")
	assert.NotContains(t, body, a.PlayerKey)
	assert.NotContains(t, body, "secret")
}

// TestSpoofedInputIsRefused: alice and bob play a match over HTTP; bob sends inputs as
// alice, once with no credential and once with his own ticket's secret. Both are refused
// and alice, who sends nothing, does not move; bob's own input moves bob.
func TestSpoofedInputIsRefused(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 2, time.Hour, 30*time.Second
	s := start(t, opts)
	code, alice := newTicketAs(t, s, "alice", "Alice", "")
	require.Equal(t, 201, code)
	code, bob := newTicketAs(t, s, "bob", "Bob", "")
	require.Equal(t, 201, code)
	var got ticketJSON
	require.Equal(t, 200, getJSON(t, s.url("/tickets/"+alice.ID+"?wait=10"), &got))
	require.NotNil(t, got.Assignment, "alice and bob make a full match")
	input := got.Assignment.Input
	var before snapshot
	require.Equal(t, 200, getJSON(t, s.url(got.Assignment.State+"?since=0"), &before))

	code, _ = call(t, "POST", s.url(input+"?player=alice"), `{"dx":1,"dy":1,"seq":1}`, nil)
	assert.Equal(t, 401, code, "an input with no credential")
	code, _ = call(t, "POST", s.url(input+"?player=alice"), `{"dx":1,"dy":1,"seq":2}`, bearer(bob.Secret))
	assert.Equal(t, 403, code, "an input as alice with bob's secret")
	code, _ = call(t, "POST", s.url(input+"?player=bob"), `{"dx":1,"dy":1,"seq":1}`, bearer(bob.Secret))
	assert.Equal(t, 202, code, "bob's own input")

	after := snapshot{Seq: before.Seq}
	for after.Seq < before.Seq+10 { // half a second of ticks: a queued input is applied at the next one
		var next snapshot // a fresh one: decoding into after would write into before's Players
		require.Equal(t, 200, getJSON(t, s.url(got.Assignment.State+"?since="+strconv.FormatUint(after.Seq, 10)), &next))
		after = next
	}
	assert.Equal(t, position(t, before, "alice"), position(t, after, "alice"), "alice did not move")
	assert.NotEqual(t, position(t, before, "bob"), position(t, after, "bob"), "bob did")
}

// wsDial opens /ws with query q and returns the connection, or the HTTP status it was refused with.
func wsDial(t *testing.T, s *server, q string) (*websocket.Conn, int) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+s.addr+"/ws?"+q, nil)
	if err != nil {
		require.NotNil(t, resp, "dial: %v", err)
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { ws.Close() })
	return ws, 101
}

// readUntil reads messages until one of type typ (or fails after 5 s).
func readUntil(t *testing.T, ws *websocket.Conn, typ string) json.RawMessage {
	t.Helper()
	for {
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, b, err := ws.ReadMessage()
		require.NoError(t, err, "waiting for a %q message", typ)
		var m struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(b, &m))
		if m.Type == typ {
			return b
		}
	}
}

// TestHijackWithTicketIDIsRefused: alice plays over WebSocket; an attacker who knows (or
// guesses) her ticket id opens /ws on it, with no secret (401), with bob's secret and a
// made-up one (403), and with a counter's ids (404). Each is refused before the upgrade,
// and alice's socket keeps receiving states with alice still in play.
func TestHijackWithTicketIDIsRefused(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 2, time.Hour, 30*time.Second
	s := start(t, opts)
	alice, code := wsDial(t, s, "player=alice&name=Alice")
	require.Equal(t, 101, code)
	var first struct {
		Ticket created `json:"ticket"`
		Secret string  `json:"secret"`
	}
	require.NoError(t, json.Unmarshal(readUntil(t, alice, "ticket"), &first))
	bob, code := wsDial(t, s, "player=bob&name=Bob")
	require.Equal(t, 101, code)
	var bobs struct {
		Secret string `json:"secret"`
	}
	require.NoError(t, json.Unmarshal(readUntil(t, bob, "ticket"), &bobs))
	readUntil(t, alice, "assigned")
	readUntil(t, alice, "state")
	go func() { // bob's socket is read so that the broadcast never stalls on it
		for {
			if _, _, err := bob.ReadMessage(); err != nil {
				return
			}
		}
	}()

	id := first.Ticket.ID
	for q, want := range map[string]int{
		"player=alice&ticket=" + id:                            401, // no secret
		"player=alice&ticket=" + id + "&secret=" + bobs.Secret: 403,
		"ticket=" + id + "&secret=wrong":                       403,
	} {
		_, code := wsDial(t, s, q)
		assert.Equal(t, want, code, "/ws?%s", q)
	}
	for _, guess := range []string{"t1", "t2", "t3"} {
		_, code := wsDial(t, s, "player=alice&ticket="+guess)
		assert.Contains(t, []int{403, 404}, code, "a guessed ticket id %s", guess)
	}
	for range 10 {
		var m message
		require.NoError(t, json.Unmarshal(readUntil(t, alice, "state"), &m), "alice's socket keeps its states")
		for _, p := range m.State.Players {
			if p.ID == "alice" {
				assert.False(t, m.State.Over, "the match goes on")
			}
		}
	}
	humans := map[string]int{}
	var rooms struct {
		Rooms []struct {
			ID     string `json:"id"`
			Humans int    `json:"humans"`
		} `json:"rooms"`
	}
	require.Equal(t, 200, getJSON(t, s.url("/rooms"), &rooms))
	for _, r := range rooms.Rooms {
		humans[r.ID] = r.Humans
	}
	require.Len(t, humans, 1)
	for _, h := range humans {
		assert.Equal(t, 2, h, "alice is not marked gone")
	}
}

// TestCancellingAnotherPlayersTicketIsRefused: mallory deletes alice's queued ticket with
// no credential and with her own ticket's secret: 401 and 403, and the ticket stays
// queued; alice's own secret cancels it.
func TestCancellingAnotherPlayersTicketIsRefused(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Wait = time.Hour
	s := start(t, opts)
	code, alice := newTicketAs(t, s, "alice", "Alice", "")
	require.Equal(t, 201, code)
	code, mallory := newTicketAs(t, s, "mallory", "Mallory", "")
	require.Equal(t, 201, code)

	code, _ = call(t, "DELETE", s.url("/tickets/"+alice.ID), "", nil)
	assert.Equal(t, 401, code, "no credential")
	code, _ = call(t, "DELETE", s.url("/tickets/"+alice.ID), "", bearer(mallory.Secret))
	assert.Equal(t, 403, code, "another ticket's secret")
	code, _ = call(t, "DELETE", s.url("/tickets/"+alice.ID+"?secret="+url.QueryEscape(mallory.Secret)), "", nil)
	assert.Equal(t, 403, code, "another ticket's secret in the query")
	assert.Equal(t, "queued", ticketState(t, s, alice.ID), "alice's ticket is still queued")

	code, _ = call(t, "DELETE", s.url("/tickets/"+alice.ID), "", bearer(alice.Secret))
	assert.Equal(t, 204, code, "alice cancels her own")
	assert.Equal(t, "cancelled", ticketState(t, s, alice.ID))
}

// TestRenamingAnotherPlayerIsRefused: mallory queues tickets as alice to rename her, while
// alice is queued (which used to answer 409 and rename her anyway) and after, with no key
// and with a wrong one: each is refused and the profile keeps alice's name; no ticket is
// queued for mallory's attempts. Alice renames herself with her key.
func TestRenamingAnotherPlayerIsRefused(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Wait = time.Hour
	s := start(t, opts)
	code, alice := newTicketAs(t, s, "alice", "Alice", "")
	require.Equal(t, 201, code)
	require.Equal(t, "Alice", profileName(t, s, "alice"))

	code, _ = newTicketAs(t, s, "alice", "Mallory", "")
	assert.Equal(t, 401, code, "while alice is queued, no key")
	assert.Equal(t, "Alice", profileName(t, s, "alice"))

	code, _ = call(t, "DELETE", s.url("/tickets/"+alice.ID), "", bearer(alice.Secret))
	require.Equal(t, 204, code)
	code, _ = newTicketAs(t, s, "alice", "Mallory", "")
	assert.Equal(t, 401, code, "alice not queued, no key")
	code, _ = newTicketAs(t, s, "alice", "Mallory", "not-her-key")
	assert.Equal(t, 403, code, "a wrong key")
	_, code = wsDial(t, s, "player=alice&name=Mallory&key=not-her-key")
	assert.Equal(t, 403, code, "a wrong key over /ws")
	assert.Equal(t, "Alice", profileName(t, s, "alice"))
	var v roomsView
	require.Equal(t, 200, getJSON(t, s.url("/rooms"), &v))
	assert.Zero(t, v.Queued, "no ticket was queued for the refused attempts")

	code, again := newTicketAs(t, s, "alice", "Alice B", alice.PlayerKey)
	require.Equal(t, 201, code, "alice with her key")
	assert.Empty(t, again.PlayerKey, "the key is issued once")
	assert.Equal(t, "Alice B", profileName(t, s, "alice"))
}
