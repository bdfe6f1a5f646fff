package offload_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonrt/baton/offload"
)

// A handler offloads a blocking call, guards a hot endpoint with a gate and streams a
// blocking source. On the loop, the Caller is the handler's *loop.Ctx; here a GoCaller
// stands in for a handler running in its own goroutine.
func Example() {
	pool := offload.New(offload.Config{Tokens: 8, SlowKeys: []string{"GET /export/*"}})
	defer pool.Close(context.Background())

	c := offload.NewGoCaller(context.Background(), pool, "GET /users/{id}")
	name, err := offload.Do(c, func(ctx context.Context) (string, error) {
		return "ada", nil // a database query, with ctx
	})
	fmt.Println(name, err)

	gate := offload.NewGate("POST /checkout", 1, 0)
	if gate.TryEnter() {
		fmt.Println("first checkout enters")
	}
	if !gate.TryEnter() {
		fmt.Println("second checkout: 503, Retry-After: 1") // no pool token spent
	}
	gate.Leave()

	var body strings.Builder
	rows := []string{"id,name\n", "1,ada\n", "2,grace\n"}
	export := offload.NewGoCaller(context.Background(), pool, "GET /export/users")
	n, err := offload.CopySeq(export, &body, func(yield func([]byte, error) bool) {
		for _, r := range rows { // a database cursor, read in the pool
			if !yield([]byte(r), nil) {
				return
			}
		}
	})
	fmt.Printf("%d bytes, %v:\n%s", n, err, body.String())

	st := pool.Stats()
	slow := st.Lanes[1] // [0] is the fast lane
	fmt.Println(slow.Lane, "lane:", slow.Tokens, "tokens,", slow.Completed, "calls")
	// Output:
	// ada <nil>
	// first checkout enters
	// second checkout: 503, Retry-After: 1
	// 22 bytes, <nil>:
	// id,name
	// 1,ada
	// 2,grace
	// slow lane: 2 tokens, 4 calls
}
