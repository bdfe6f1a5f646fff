//go:build !linux

package etcd

import "syscall"

// childAttr: only Linux has a parent-death signal; elsewhere the test's cleanup stops the
// etcd children.
func childAttr() *syscall.SysProcAttr { return nil }
