package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/directory/directorytest"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain()) // a node of the cluster tests (node_test.go)
	}
	goleak.VerifyTestMain(m, looptest.GoleakOptions()...) // the nodes' tests import loop (gnet's pool)
}

// TestConformance runs directory's conformance suite against one real etcd, each subtest
// under a prefix of its own.
func TestConformance(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	n := 0
	directorytest.Run(t, func(t *testing.T) directory.Opener {
		n++
		return New(cli, fmt.Sprintf("/conformance/%d/", n))
	})
}

// open opens node id on b with the given TTL and request timeout; it is closed at the end
// of the test.
func open(t *testing.T, ctx context.Context, b *Backend, id string, ttl, timeout time.Duration) directory.Directory {
	t.Helper()
	d, err := b.Open(ctx, directory.Config{Node: id, PublicAddr: id + ":80", TTL: ttl, RequestTimeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = d.Close(cctx)
	})
	return d
}

// TestLeaseLapseFreesClaims checks that a node that stops renewing loses all its claims,
// at once, within TTL + 1 s of its last renewal, and that its local check lapsed first.
func TestLeaseLapseFreesClaims(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := New(cli, "")
	a := open(t, ctx, b, "a", time.Second, time.Second)
	probe := open(t, ctx, b, "probe", 10*time.Second, time.Second)
	const rooms = 100
	for i := range rooms {
		_, err := a.Claim(ctx, fmt.Sprintf("room-%03d", i))
		require.NoError(t, err)
	}
	renewed := time.Now()
	_, err := a.KeepAlive(ctx)
	require.NoError(t, err)
	ttl := a.Lease().TTL
	require.Equal(t, time.Second, ttl, "etcd with a 500 ms election timeout grants a 1 s lease")

	var invalidAt time.Time
	for {
		got, err := probe.Rooms(ctx, "a")
		require.NoError(t, err)
		// Read after the answer: a check still valid once the rooms are seen gone means
		// etcd freed them while the node could still tick them.
		if invalidAt.IsZero() && !a.Valid() {
			invalidAt = time.Now()
		}
		if len(got) == 0 {
			break
		}
		require.Len(t, got, rooms, "the claims go all at once")
		require.Less(t, time.Since(renewed), ttl+time.Second, "claims still listed TTL + 1 s after the last renewal")
		time.Sleep(10 * time.Millisecond)
	}
	gone := time.Since(renewed)
	require.False(t, invalidAt.IsZero(), "the local check must lapse before etcd frees the rooms")
	t.Logf("lease TTL %v: local check lapsed %v after the last renewal, claims gone after %v", ttl, invalidAt.Sub(renewed).Round(time.Millisecond), gone.Round(time.Millisecond))
	_, err = a.KeepAlive(ctx)
	require.ErrorIs(t, err, directory.ErrLeaseExpired)
	nodes, err := probe.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1, "a's record went with its lease")
}

// TestEtcdDownAndBack stops the only etcd member and starts it again: meanwhile every
// call fails with ErrUnavailable within the request timeout and the lease's local check
// lapses; once etcd is back, calls succeed again, and the node's lease and claims are
// either both alive or both gone.
func TestEtcdDownAndBack(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := New(cli, "")
	const timeout = 300 * time.Millisecond
	a := open(t, ctx, b, "a", 2*time.Second, timeout)
	claim, err := a.Claim(ctx, "r")
	require.NoError(t, err)

	c.kill(c.members[0])
	down := time.Now()
	start := time.Now()
	_, err = a.Claim(ctx, "r2")
	require.ErrorIs(t, err, directory.ErrUnavailable)
	refuse := time.Since(start)
	require.Less(t, refuse, timeout+time.Second, "a claim is refused within the request timeout")
	_, err = a.Lookup(ctx, "r")
	require.ErrorIs(t, err, directory.ErrUnavailable)
	_, err = a.KeepAlive(ctx)
	require.ErrorIs(t, err, directory.ErrUnavailable)
	require.ErrorIs(t, a.Publish(ctx, directory.Status{}), directory.ErrUnavailable)
	_, err = a.Place(ctx)
	require.ErrorIs(t, err, directory.ErrUnavailable)
	_, err = b.Open(ctx, directory.Config{Node: "b", RequestTimeout: timeout})
	require.ErrorIs(t, err, directory.ErrUnavailable)
	require.Eventually(t, func() bool { return !a.Valid() }, 5*time.Second, 10*time.Millisecond, "the local check lapses while etcd is down")
	invalid := time.Since(down)

	require.NoError(t, c.start(c.members[0]))
	restarted := time.Now()
	require.NoError(t, c.waitHealthy(15*time.Second))
	var kaErr error
	require.Eventually(t, func() bool {
		_, kaErr = a.KeepAlive(ctx)
		return kaErr == nil || !isUnavailable(kaErr)
	}, 15*time.Second, 20*time.Millisecond, "keep-alive answers once etcd is back")
	recovered := time.Since(restarted)
	got, lerr := a.Lookup(ctx, "r")
	if kaErr == nil {
		// etcd restores leases with a fresh TTL when a leader takes over: the lease and
		// the claim survived together.
		require.NoError(t, lerr)
		require.Equal(t, claim, got)
		require.True(t, a.Valid())
	} else {
		require.ErrorIs(t, kaErr, directory.ErrLeaseExpired)
		require.ErrorIs(t, lerr, directory.ErrNotClaimed)
	}
	bNode := open(t, ctx, b, "b", 2*time.Second, time.Second)
	_, err = bNode.Claim(ctx, "r3")
	require.NoError(t, err, "new claims work again")
	t.Logf("refused after %v, local check lapsed %v after etcd went down, keep-alive answered %v after the restart (lease kept: %v)",
		refuse.Round(time.Millisecond), invalid.Round(time.Millisecond), recovered.Round(time.Millisecond), kaErr == nil)
}

func isUnavailable(err error) bool {
	return err != nil && errors.Is(err, directory.ErrUnavailable)
}

// TestThreeMembersLeaderKilled kills the leader of a 3-member cluster: claims, lookups
// and keep-alives go on once the two others elect a leader, and nothing is lost.
func TestThreeMembersLeaderKilled(t *testing.T) {
	c := startCluster(t, 3)
	cli := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := New(cli, "")
	a := open(t, ctx, b, "a", 5*time.Second, time.Second)
	var claims []directory.Claim
	for i := range 10 {
		cl, err := a.Claim(ctx, fmt.Sprintf("r%d", i))
		require.NoError(t, err)
		claims = append(claims, cl)
	}
	leader, err := c.leader(ctx, cli)
	require.NoError(t, err)
	c.kill(leader)
	killed := time.Now()

	var first directory.Claim
	require.Eventually(t, func() bool {
		first, err = a.Claim(ctx, "after")
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "a claim succeeds on the two remaining members: %v", err)
	took := time.Since(killed)
	require.Greater(t, first.Token, claims[len(claims)-1].Token)
	_, err = a.KeepAlive(ctx)
	require.NoError(t, err)
	require.True(t, a.Valid())
	for _, cl := range claims {
		got, err := a.Lookup(ctx, cl.Room)
		require.NoError(t, err)
		require.Equal(t, cl, got, "claims survive the leader change")
	}
	b2 := open(t, ctx, b, "b", 5*time.Second, time.Second)
	_, err = b2.Claim(ctx, "r0")
	require.ErrorIs(t, err, directory.ErrAlreadyOwned)
	t.Logf("leader %s killed: first claim after %v", leader.name, took.Round(time.Millisecond))
}
