package accounting

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// TasksSnapshot is what the tasks endpoint shows. Plain data.
type TasksSnapshot struct {
	Live          []TaskSample // live tasks, sorted by OnLoop, longest first
	Finished      []TaskSample // recently finished tasks, newest first
	FinishedTotal uint64       // tasks finished since start
}

// summaryDoc is a Summary's JSON document (Summary.MarshalJSON). Field names and units are
// defined in docs/accounting.md.
type summaryDoc struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	P999  float64 `json:"p999_seconds"`
	Max   float64 `json:"max_seconds"`
}

func summaryJSON(s Summary) summaryDoc {
	return summaryDoc{
		Count: s.Count, Mean: s.Mean().Seconds(),
		P50: s.P50.Seconds(), P90: s.P90.Seconds(), P99: s.P99.Seconds(), P999: s.P999.Seconds(),
		Max: s.Max.Seconds(),
	}
}

func marshalJSON(v any) ([]byte, error) { return json.Marshal(v) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ms formats d in milliseconds with three decimals, the unit of the text views.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// textWriter gathers a text view; the first write error sticks.
type textWriter struct {
	bw  *bufio.Writer
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.bw, format, args...)
	}
}

func (t *textWriter) table(header string, rows [][]string) {
	if t.err != nil {
		return
	}
	tw := tabwriter.NewWriter(t.bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The last cell of a line is not tab-terminated: it is free text, left as it is (the
	// route, like top's COMMAND), while the cells before it are right-aligned.
	line := func(cells []string) string {
		n := len(cells) - 1
		return strings.Join(cells[:n], "\t") + "\t  " + cells[n] + "\n"
	}
	_, t.err = io.WriteString(tw, line(strings.Split(header, "\t")))
	for _, r := range rows {
		if t.err == nil {
			_, t.err = io.WriteString(tw, line(r))
		}
	}
	if t.err == nil {
		t.err = tw.Flush()
	}
}

func (t *textWriter) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.bw.Flush()
}
