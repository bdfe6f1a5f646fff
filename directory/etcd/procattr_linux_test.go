package etcd

import "syscall"

// childAttr makes the kernel kill an etcd child when the test binary dies, so that a
// crashed or timed-out test leaves no server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
