//go:build !race

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserJoinsCluster: the page of docs/cluster.md's recipe. With etcd and three
// gameserver processes, a player seated in room "lobby" through the first node (a
// gorilla/websocket client, so the room is claimed and kept alive), headless Chromium
// opens /?room=lobby on each of the other nodes: the page asks its node's /join, connects
// its WebSocket to the owner's address (another origin for two of the pages), is seated on
// the owner under the room's token, and draws the match's states. Built without -race, as
// TestBrowserPlays; skipped where etcd or Chromium is missing.
func TestBrowserJoinsCluster(t *testing.T) {
	exe := chromium(t)
	addrs := startGameCluster(t)
	j, err := joinThrough(addrs[0], "lobby", "anchor")
	require.NoError(t, err)
	conn, _, err := dialSeat(j)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	var hello clusterHello
	for hello.Type != "joined" {
		require.NoError(t, conn.ReadJSON(&hello))
	}
	go func() { // keep reading the states, so that the owner never finds this player slow
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	require.NoError(t, conn.SetReadDeadline(time.Time{}))

	copts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), copts...)
	defer acancel()
	for _, via := range addrs[1:] {
		ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
		ctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
		var seatNode string
		var token int64
		err := chromedp.Run(ctx,
			chromedp.Navigate("http://"+via+"/?room=lobby"),
			chromedp.Poll(`window.batonSeat && batonFrames() >= 5`, nil,
				chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)),
			chromedp.Evaluate(`batonSeat.node`, &seatNode),
			chromedp.Evaluate(`batonSeat.token`, &token),
		)
		tcancel()
		cancel()
		require.NoError(t, err, "the page on %s was not seated and drawing", via)
		require.Equal(t, hello.Node, seatNode, "the page on %s was seated on another node than the owner", via)
		require.Equal(t, int64(hello.Token), token, fmt.Sprintf("the page on %s: the room's token", via))
		t.Logf("page on %s: seated on %s (token %d)", via, seatNode, token)
	}
}
