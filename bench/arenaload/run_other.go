//go:build !linux

package arenaload

import (
	"context"
	"errors"
)

func run(context.Context, Config) (*Result, error) {
	return nil, errors.New("arenaload: Linux only (epoll)")
}
