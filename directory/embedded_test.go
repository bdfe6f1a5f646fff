package directory_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/directory/directorytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestEmbeddedConformance runs the conformance suite against the in-memory backend.
func TestEmbeddedConformance(t *testing.T) {
	directorytest.Run(t, func(t *testing.T) directory.Opener { return directory.NewEmbedded() })
}

// TestEmbeddedSubSecondLease checks that the embedded backend keeps a TTL shorter than a
// second as given (etcd cannot), so single-process tests of lapses run fast.
func TestEmbeddedSubSecondLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := directory.NewEmbedded()
	d, err := e.Open(ctx, directory.Config{Node: "a", TTL: 200 * time.Millisecond})
	require.NoError(t, err)
	defer d.Close(ctx)
	require.Equal(t, 200*time.Millisecond, d.Lease().TTL)
	require.Equal(t, 40*time.Millisecond, d.Lease().Margin, "the default margin is a fifth of the TTL")
	_, err = d.Claim(ctx, "r")
	require.NoError(t, err)
	probe, err := e.Open(ctx, directory.Config{Node: "probe"})
	require.NoError(t, err)
	defer probe.Close(ctx)
	require.Eventually(t, func() bool {
		_, err := probe.Lookup(ctx, "r")
		return err != nil
	}, 5*time.Second, 5*time.Millisecond)
	require.False(t, d.Valid())
	_, err = d.KeepAlive(ctx)
	require.ErrorIs(t, err, directory.ErrLeaseExpired)
}

// TestEmbeddedCancelledContext checks that a cancelled context is reported as the backend
// not answering, with the context's error.
func TestEmbeddedCancelledContext(t *testing.T) {
	e := directory.NewEmbedded()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := e.Open(ctx, directory.Config{Node: "a"})
	require.NoError(t, err)
	cancel()
	_, err = d.Claim(ctx, "r")
	require.ErrorIs(t, err, directory.ErrUnavailable)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, d.Close(context.Background()))
}

// TestSharedConformance runs the conformance suite against a shared directory: one file,
// as several processes of a machine share it.
func TestSharedConformance(t *testing.T) {
	directorytest.Run(t, func(t *testing.T) directory.Opener {
		d, err := directory.NewShared(filepath.Join(t.TempDir(), "dir"))
		require.NoError(t, err)
		return d
	})
}

// TestSharedAcrossHandles: two directories opened on one file, as two processes of a
// machine do, are one directory: a claim made through one is seen through the other, a
// room moves from a node of one to a node of the other with a greater token, tokens keep
// growing across them, and a node that stops renewing loses its rooms to the other.
func TestSharedAcrossHandles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "dir")
	one, err := directory.NewShared(path)
	require.NoError(t, err)
	two, err := directory.NewShared(path)
	require.NoError(t, err)
	a, err := one.Open(ctx, directory.Config{Node: "a", InternalAddr: "127.0.0.1:1", TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	defer a.Close(ctx)
	b, err := two.Open(ctx, directory.Config{Node: "b", InternalAddr: "127.0.0.1:2"})
	require.NoError(t, err)
	defer b.Close(ctx)
	_, err = two.Open(ctx, directory.Config{Node: "a"})
	require.ErrorIs(t, err, directory.ErrNodeInUse, "node a is live in the other handle's process")

	c1, err := a.Claim(ctx, "r1")
	require.NoError(t, err)
	seen, err := b.Lookup(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, c1, seen)
	moved, err := a.Move(ctx, "r1", c1.Token, "b")
	require.NoError(t, err)
	require.Greater(t, moved.Token, c1.Token)
	require.Equal(t, "127.0.0.1:2", moved.InternalAddr)
	rooms, err := b.Rooms(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, []directory.Claim{moved}, rooms)
	_, err = b.Move(ctx, "r1", c1.Token, "a")
	require.ErrorIs(t, err, directory.ErrNotOwner, "the stale token")

	c2, err := a.Claim(ctx, "r2")
	require.NoError(t, err)
	require.Greater(t, c2.Token, moved.Token)
	// a stops renewing: its lease (300 ms) lapses, by the machine's clock, for b too.
	require.Eventually(t, func() bool {
		_, err := b.Lookup(ctx, "r2")
		return errors.Is(err, directory.ErrNotClaimed)
	}, 5*time.Second, 10*time.Millisecond)
	_, err = a.KeepAlive(ctx)
	require.ErrorIs(t, err, directory.ErrLeaseExpired)
	c3, err := b.Claim(ctx, "r2")
	require.NoError(t, err)
	require.Greater(t, c3.Token, c2.Token)
}

// FuzzSharedFile: whatever a shared directory's file holds (another program's bytes, a
// state cut short), a call reads it as a state or fails with ErrUnavailable, never
// panics; a state it accepts stays usable (a node opens, claims and looks up a room).
func FuzzSharedFile(f *testing.F) {
	f.Add([]byte(`{"rev":3,"last_lease":1,"leases":{"1":{"node":"a","ttl":5000000000,"expiry":1,"rooms":{"r":{}}}},"nodes":{"a":{"info":{"ID":"a"},"lease":1}},"rooms":{"r":{"claim":{"Room":"r","Node":"a","Token":3},"lease":1}}}`))
	f.Add([]byte(`{"leases":{"1":null},"rooms":{"r":{"claim":{"Room":"r"},"lease":9}}}`))
	f.Add([]byte(`{"leases":{"7":{"node":"x","ttl":-1,"expiry":9223372036854775807}}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"rev":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "dir")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		d, err := directory.NewShared(path)
		require.NoError(t, err)
		ctx := context.Background()
		n, err := d.Open(ctx, directory.Config{Node: "fuzz"})
		if err != nil {
			if !errors.Is(err, directory.ErrUnavailable) && !errors.Is(err, directory.ErrNodeInUse) {
				t.Fatalf("open: %v", err)
			}
			return
		}
		defer n.Close(ctx)
		if _, err := n.Claim(ctx, "fuzz-room"); err != nil && !errors.Is(err, directory.ErrAlreadyOwned) {
			t.Fatalf("claim: %v", err)
		}
		if _, err := n.Lookup(ctx, "fuzz-room"); err != nil {
			t.Fatalf("lookup: %v", err)
		}
		_, _ = n.Place(ctx)
		_, _ = n.Nodes(ctx)
	})
}
