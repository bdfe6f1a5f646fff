package render_test

import (
	"fmt"
	"os"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/render"
)

// ExampleAppendServerTiming builds a response's Server-Timing header from its task's
// figures.
func ExampleAppendServerTiming() {
	s := accounting.TaskSample{OnLoop: 123 * time.Microsecond, QueueDelay: 10 * time.Microsecond}
	s.Parked.Offload = 50200 * time.Microsecond
	fmt.Println(string(render.AppendServerTiming(nil, &s)))
	// Output:
	// onloop;dur=0.123, queue;dur=0.010, parked;dur=50.200
}

// ExampleWriteLoopText renders a loop's figures, as the stats pages do off the loop.
func ExampleWriteLoopText() {
	l := accounting.LoopSnapshot{Uptime: time.Minute, BusyTotal: 6 * time.Second, TasksStarted: 3, TasksDone: 2}
	for i, w := range accounting.UtilisationWindows {
		l.Utilisation[i] = accounting.Window{Length: w, Busy: w / 10, Elapsed: w}
	}
	_ = render.WriteLoopText(os.Stdout, l)
	// Output:
	// baton loop: up 1m0s, busy 6s in total
	// utilisation   1s  10.0%   10s  10.0%   60s  10.0%
	// tasks         live 1   started 3   completed 2
	// ready queue   now 0   max 0
	// switches      total 0   0.0/s over the last 10s
	// slices        mean 0.000 ms   max 0.000 ms   slow 0 (0.000 ms in all)
	//
	//   COUNT   MEAN    P50    P90    P99   P999    MAX  (ms)
	//       0  0.000  0.000  0.000  0.000  0.000  0.000  lag (ready->run)
}
