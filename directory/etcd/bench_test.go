package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
)

// The round trips of the directory's calls on one loopback etcd member (docs/cluster.md,
// "Sizing"). Each benchmark starts its own member.

func benchNode(b *testing.B, id string) (directory.Directory, *Backend) {
	c := startCluster(b, 1)
	be := New(c.client(b), "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := be.Open(ctx, directory.Config{Node: id, PublicAddr: id + ":80"})
	require.NoError(b, err)
	b.Cleanup(func() { _ = d.Close(context.Background()) })
	return d, be
}

func BenchmarkKeepAlive(b *testing.B) {
	d, _ := benchNode(b, "a")
	ctx := context.Background()
	for b.Loop() {
		if _, err := d.KeepAlive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublish(b *testing.B) {
	d, _ := benchNode(b, "a")
	ctx := context.Background()
	st := directory.Status{Load: directory.Load{Utilisation: 0.4, RoomShare: 0.3, Rooms: 100, Players: 400}}
	for b.Loop() {
		if err := d.Publish(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimRelease(b *testing.B) {
	d, _ := benchNode(b, "a")
	ctx := context.Background()
	i := 0
	for b.Loop() {
		room := fmt.Sprintf("r%d", i)
		i++
		c, err := d.Claim(ctx, room)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Release(ctx, room, c.Token); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	d, _ := benchNode(b, "a")
	ctx := context.Background()
	_, err := d.Claim(ctx, "r")
	require.NoError(b, err)
	for b.Loop() {
		if _, err := d.Lookup(ctx, "r"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlace places among 3 nodes holding 1,000 rooms between them.
func BenchmarkPlace(b *testing.B) {
	d, be := benchNode(b, "a")
	ctx := context.Background()
	nodes := []directory.Directory{d}
	for _, id := range []string{"b", "c"} {
		n, err := be.Open(ctx, directory.Config{Node: id})
		require.NoError(b, err)
		b.Cleanup(func() { _ = n.Close(context.Background()) })
		nodes = append(nodes, n)
	}
	for i := range 1000 {
		_, err := nodes[i%3].Claim(ctx, fmt.Sprintf("r%d", i))
		require.NoError(b, err)
	}
	for b.Loop() {
		if _, err := d.Place(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
