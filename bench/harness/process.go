package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Process is a program a scenario runs against instead of the targets (Scenario.Process):
// a server that is not one of the built-in targets and not served by this binary, e.g. the
// examples/gameserver binary built from its own module.
type Process struct {
	// Name is the target name the runs are reported under.
	Name string
	// Path is the program's executable.
	Path string
	// Args returns its arguments for one run; dir is a fresh temporary directory (for its
	// data), removed once the process stopped.
	Args func(dir string) []string
	// Addr reads the server's "host:port" from a line of its standard output (ok false:
	// not that line). The process is stopped with SIGTERM (then SIGKILL after 5 s).
	Addr func(line string) (addr string, ok bool)
	// Release, if set, is called once the scenario's phases have run (e.g. to remove a
	// binary built for them).
	Release func()
}

// scenarioTargets returns the targets sc runs against: the runner's, or sc's own program,
// and a function to call once its phases have run.
func (r *runner) scenarioTargets(ctx context.Context, sc *Scenario, p Params) ([]Target, func(), error) {
	if sc.Process == nil {
		return r.opts.Targets, func() {}, nil
	}
	proc, err := sc.Process(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	if proc == nil || proc.Path == "" || proc.Args == nil || proc.Addr == nil {
		return nil, nil, errors.New("the scenario's Process lacks Path, Args or Addr")
	}
	release := func() {
		if proc.Release != nil {
			proc.Release()
		}
	}
	return []Target{{Name: proc.Name, proc: proc}}, release, nil
}

// startProcess runs proc with a fresh temporary directory, pinned to cpus with taskset when
// cpus is not empty, and waits for it to print its address.
func startProcess(proc *Process, cpus, taskset string, logw io.Writer) (*server, error) {
	dir, err := os.MkdirTemp("", "baton-bench-"+fileName(proc.Name)+"-")
	if err != nil {
		return nil, err
	}
	cmd := pinned(cpus, taskset, proc.Path, proc.Args(dir)...)
	s, err := launch(cmd, logw, proc.Addr, "")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %w", proc.Name, err)
	}
	s.dir = dir
	return s, nil
}
