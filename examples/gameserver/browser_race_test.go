//go:build race

package main

import "testing"

// TestBrowserPlays is built without -race only: it drives a browser (the server's races
// are the other tests' business, and instrumenting chromedp would cost a minute of build).
// `make test` runs it in a line of its own without -race.
func TestBrowserPlays(t *testing.T) {
	t.Skip("gameserver: the browser test runs without -race: cd examples/gameserver && go test -run TestBrowserPlays . (make test does)")
}

// TestBrowserJoinsCluster is built without -race only, as TestBrowserPlays.
func TestBrowserJoinsCluster(t *testing.T) {
	t.Skip("gameserver: the browser test runs without -race: cd examples/gameserver && go test -run TestBrowserJoinsCluster . (make test does)")
}
