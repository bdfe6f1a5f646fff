//go:build !linux && !freebsd

package harness

import "syscall"

// childAttr puts a server child in a process group of its own. There is no parent-death
// signal on this platform: a child is ended by server.stop only, so one started by a
// harness that is killed keeps running until it is stopped by hand.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
