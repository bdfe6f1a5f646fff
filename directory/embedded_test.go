package directory_test

import (
	"context"
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
