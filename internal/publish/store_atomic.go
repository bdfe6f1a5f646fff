//go:build !amd64 || race

package publish

import "sync/atomic"

// plainStore reports that Store is sync/atomic's: under the race detector, so that it sees
// the writes, or off amd64, where the CPU may reorder plain stores.
const plainStore = false

func store(p *int64, v int64) { atomic.StoreInt64(p, v) }
