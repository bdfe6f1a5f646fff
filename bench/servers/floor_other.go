//go:build !linux

package servers

import (
	"errors"
	"log/slog"
)

func startFloor(string, *slog.Logger) (*Running, error) {
	return nil, errors.New("servers: the floor target is Linux only (epoll, raw system calls)")
}
