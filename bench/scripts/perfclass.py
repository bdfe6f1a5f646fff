#!/usr/bin/env python3
"""Break a server's perf recording (perf record -g, e.g. from cmd/ws-ab -perf) down by
stack into buckets and print each as µs per message: the kernel's write path (TCP send,
the loopback receive and the reader's wake-up that loopback charges to the sender, the
system call entry), other system calls, Go's syscall glue, the runtime, gnet, baton,
gorilla. Buckets are chosen by frame names; read the 'detail' output before trusting one.

usage: perfclass.py perf.data SAMPLE_HZ MESSAGES [detail]"""
import subprocess, sys, collections

data, hz, msgs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
detail = len(sys.argv) > 4
out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True).stdout

def syscall_of(user):
    for f in user:
        if f in ("golang.org/x/sys/unix.write", "syscall.write", "golang.org/x/sys/unix.writev", "syscall.writev", "github.com/batonrt/baton/loop.rawWrite", "github.com/batonrt/baton/loop.(*Server).writeOut") or "rawWrite" in f:
            return "write"
        if "EpollWait" in f or "epollwait" in f or "epoll_pwait" in f:
            return "epoll_wait"
        if "EpollCtl" in f or "epollctl" in f:
            return "epoll_ctl"
        if "futex" in f:
            return "futex"
        if "usleep" in f or "nanosleep" in f:
            return "usleep"
        if f in ("golang.org/x/sys/unix.read", "syscall.read"):
            return "read"
        if "Shutdown" in f or "Close" in f:
            return "close/shutdown"
        if "tgkill" in f or "signal" in f:
            return "signal"
        if "mmap" in f or "madvise" in f or "sysAlloc" in f or "sysUnused" in f:
            return "mm"
    return "other:" + (user[0] if user else "?")

def user_bucket(leaf, stack):
    if leaf.startswith("github.com/panjf2000/gnet"):
        return "user: gnet"
    if leaf.startswith("github.com/batonrt/baton/loop"):
        return "user: baton loop (ws/broadcast/flush)"
    if leaf.startswith("github.com/batonrt/baton/scheduler"):
        return "user: baton scheduler"
    if leaf.startswith("github.com/batonrt/baton/accounting"):
        return "user: baton accounting"
    if leaf.startswith("github.com/batonrt/baton/internal/httpcodec"):
        return "user: httpcodec"
    if leaf.startswith("github.com/batonrt/baton/bench"):
        return "user: bench server code"
    if leaf.startswith("github.com/gorilla"):
        return "user: gorilla"
    if leaf.startswith("internal/poll") or leaf.startswith("net."):
        return "user: net/poll"
    if leaf.startswith("syscall.") or leaf.startswith("internal/runtime/syscall") or leaf.startswith("golang.org/x/sys/unix") or leaf in ("runtime.entersyscall", "runtime.exitsyscall", "runtime.reentersyscall", "runtime.exitsyscallfast", "runtime.entersyscall_sysmon"):
        return "user: syscall glue (Go)"
    if leaf.startswith("runtime.") or leaf.startswith("internal/runtime") or leaf.startswith("iter.") or leaf.startswith("sync") or leaf.startswith("time.") or leaf.startswith("internal/"):
        joined = " ".join(stack)
        if any(k in joined for k in ("runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.mallocgc", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart")):
            return "user: runtime gc/alloc"
        if any(k in leaf for k in ("chan", "select")):
            return "user: runtime chan/select"
        if leaf.startswith("runtime.memmove"):
            return "user: memmove"
        if any(k in joined for k in ("runtime.schedule", "runtime.park_m", "runtime.mcall", "runtime.gopark", "runtime.goready", "runtime.ready", "runtime.findRunnable", "runtime.netpoll", "runtime.sysmon", "runtime.coroswitch", "runtime.wakep", "runtime.startm", "runtime.stopm", "runtime.lock2", "runtime.unlock2", "runtime.casgstatus", "runtime.runqget", "runtime.checkTimers", "runtime.(*timer")):
            return "user: runtime scheduler/timers"
        if "nanotime" in leaf or "vdso" in leaf.lower():
            return "user: clock reads"
        return "user: runtime other"
    if "vdso" in leaf.lower() or leaf.startswith("__vdso"):
        return "user: clock reads"
    return "user: other (" + leaf.split("(")[0][:40] + ")"

buckets = collections.Counter()
leafs = collections.defaultdict(collections.Counter)
total = 0
for block in out.split("\n\n"):
    lines = [l.strip() for l in block.strip().split("\n") if l.strip()]
    if not lines:
        continue
    frames = []
    for l in lines:
        parts = l.split(None, 1)
        if len(parts) == 2 and all(c in "0123456789abcdef" for c in parts[0]):
            frames.append((parts[0], parts[1]))
    if not frames:
        continue
    total += 1
    kern = [s for a, s in frames if a.startswith("ffffffff")]
    user = [s for a, s in frames if not a.startswith("ffffffff")]
    if kern:
        ks = set(kern)
        if "do_syscall_64" in ks or "entry_SYSCALL_64_after_hwframe" in ks:
            sc = syscall_of(user)
            if sc == "write":
                if "net_rx_action" in ks or "handle_softirqs" in ks:
                    if "sock_def_readable" in ks:
                        b = "kernel write: loopback rx -> wake the reader (sock_def_readable)"
                    else:
                        b = "kernel write: loopback rx softirq (tcp_v4_rcv etc.)"
                elif any(k in ks for k in ("tcp_sendmsg", "tcp_sendmsg_locked", "sock_write_iter", "vfs_write", "ksys_write")):
                    b = "kernel write: tcp send path (no rx)"
                else:
                    b = "kernel write: syscall entry/exit"
            else:
                b = "kernel syscall: " + sc
        elif any(k in ks for k in ("asm_sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "hrtimer_interrupt")):
            b = "kernel: timer interrupt"
        elif any("page_fault" in k or k.startswith("exc_page") for k in ks):
            b = "kernel: page fault"
        else:
            b = "kernel: other (" + kern[-1] + ")"
    else:
        b = user_bucket(user[0] if user else "?", user)
    buckets[b] += 1
    leafs[b][frames[0][1]] += 1

us = lambda n: n / hz * 1e6 / msgs
print(f"samples {total}  => {us(total):.2f} µs/msg (at {hz:.0f} Hz, {msgs:.0f} msgs)")
for b, n in sorted(buckets.items(), key=lambda x: -x[1]):
    print(f"  {us(n):6.2f} µs  {100*n/total:5.1f}%  {b}")
    if detail:
        for s, m in leafs[b].most_common(6):
            print(f"              {us(m):6.2f}  {s}")
