//go:build !amd64

package publish

import "sync/atomic"

func store(p *atomic.Int64, v int64) { p.Store(v) }
