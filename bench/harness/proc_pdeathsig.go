//go:build linux || freebsd

package harness

import "syscall"

// childAttr puts a server child in a process group of its own and has the kernel kill it
// if the harness dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
