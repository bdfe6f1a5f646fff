package directory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonrt/baton/directory"
)

// Two nodes share one embedded directory: the first claims a room, the second is refused
// it, the room moves to the second under a greater fencing token, and the first, holding
// the old token, can no longer release it.
func Example() {
	ctx := context.Background()
	dir := directory.NewEmbedded()
	a, err := dir.Open(ctx, directory.Config{Node: "a", PublicAddr: "127.0.0.1:8091"})
	if err != nil {
		panic(err)
	}
	defer a.Close(ctx)
	b, err := dir.Open(ctx, directory.Config{Node: "b", PublicAddr: "127.0.0.1:8092"})
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	claim, err := a.Claim(ctx, "arena")
	if err != nil {
		panic(err)
	}
	fmt.Println("owner:", claim.Node, claim.PublicAddr)

	_, err = b.Claim(ctx, "arena")
	fmt.Println("b claims too:", errors.Is(err, directory.ErrAlreadyOwned))

	moved, err := a.Move(ctx, "arena", claim.Token, "b")
	if err != nil {
		panic(err)
	}
	fmt.Println("moved to:", moved.Node, "greater token:", moved.Token > claim.Token)

	err = a.Release(ctx, "arena", claim.Token)
	fmt.Println("old token refused:", errors.Is(err, directory.ErrNotOwner))

	seen, _ := b.Lookup(ctx, "arena")
	fmt.Println("lookup:", seen.Node)
	// Output:
	// owner: a 127.0.0.1:8091
	// b claims too: true
	// moved to: b greater token: true
	// old token refused: true
	// lookup: b
}
