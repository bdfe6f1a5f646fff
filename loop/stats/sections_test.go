package stats

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterFigures is the figures of testSection: a loop's count of hits.
type counterFigures struct {
	Hits int `json:"hits"`
	Loop int `json:"loop"`
}

// testSection is a feature's section as a feature package would write it: per-loop state
// found with Loop.Value, taken on the loop, summed over loops, with a text view and a
// panel. ?fail=1 makes Take refuse the query.
func testSection() loop.StatsSection {
	return loop.StatsSection{
		Name: "counter",
		Take: func(l *loop.Loop, q url.Values) (any, error) {
			if q.Get("fail") != "" {
				return nil, errors.New("fail was asked for")
			}
			hits := 0
			if n, ok := l.Value(counterKey{}, nil).(*int); ok {
				hits = *n
			}
			return counterFigures{Hits: hits, Loop: l.Index()}, nil
		},
		Sum: func(per []any) any {
			t := counterFigures{Loop: -1}
			for _, v := range per {
				t.Hits += v.(counterFigures).Hits
			}
			return t
		},
		Text: func(w io.Writer, v any) error {
			_, err := fmt.Fprintf(w, "hits %d\n", v.(counterFigures).Hits)
			return err
		},
		Panel: func(v any) any { return map[string]int{"hits": v.(counterFigures).Hits} },
	}
}

type counterKey struct{}

// TestStatsSectionOnEveryPage: a section added with AddStats (after HandleStats, as a
// feature adds its own on first use) is served on the server's port and by StatsHandler,
// as JSON and as text, with a 400 for a query Take refuses; it is in Snapshot.Sections and
// in the dashboard's panels; with several loops, the page carries the totals and each
// loop's figures. Over real sockets, in both modes.
func TestStatsSectionOnEveryPage(t *testing.T) {
	for _, shards := range []int{1, 3} {
		for _, mt := range []bool{false, true} {
			t.Run(fmt.Sprintf("shards=%d/multithread=%v", shards, mt), func(t *testing.T) {
				s, addr := startServer(t, loop.Config{Shards: shards, MultiThread: mt}, func(s *loop.Server) {
					Mount(s, "/debug/baton")
					s.Handle("GET /hit", func(c *loop.Ctx) {
						c.OnLoop(func() {
							*c.Loop().Value(counterKey{}, func() any { return new(int) }).(*int)++
						})
						c.String(200, "hit")
					})
				})
				require.NoError(t, s.AddStats(testSection()))
				for range 9 {
					resp, err := http.Get("http://" + addr + "/hit")
					require.NoError(t, err)
					_ = resp.Body.Close()
				}
				admin := httptest.NewServer(Handler(s))
				defer admin.Close()
				for _, base := range []string{"http://" + addr + "/debug/baton/", admin.URL + "/debug/baton/"} {
					code, page := getJSON(t, base+"counter")
					require.Equal(t, 200, code, "%v", page)
					assert.EqualValues(t, 9, page["hits"], "every hit, over every loop")
					if shards > 1 {
						rows := shardRows(t, page, shards)
						sum := 0.0
						for i, row := range rows {
							assert.EqualValues(t, i, row["loop"])
							sum += row["hits"].(float64)
						}
						assert.EqualValues(t, 9, sum)
					} else {
						assert.NotContains(t, page, "shards")
					}
					resp, err := http.Get(base + "counter?format=text")
					require.NoError(t, err)
					text, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					assert.Contains(t, string(text), "hits 9\n")
					resp, err = http.Get(base + "counter?fail=1")
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					assert.Equal(t, 400, resp.StatusCode)
					assert.Contains(t, string(body), "fail was asked for")
					resp, err = http.Get(base + "nosuchsection")
					require.NoError(t, err)
					_ = resp.Body.Close()
					assert.Equal(t, 404, resp.StatusCode)
				}

				snap, err := Take(context.Background(), s, ViewSections)
				require.NoError(t, err)
				require.Contains(t, snap.Sections, "counter")
				assert.Equal(t, 9, snap.Sections["counter"].(counterFigures).Hits)
				if shards > 1 {
					require.Len(t, snap.Shards, shards)
					sum := 0
					for _, p := range snap.Shards {
						sum += p.Sections["counter"].(counterFigures).Hits
					}
					assert.Equal(t, 9, sum)
				}

				resp, err := (&http.Client{Timeout: 20 * time.Second}).Get(admin.URL + "/debug/baton/events")
				require.NoError(t, err)
				defer resp.Body.Close()
				var f struct {
					Panels map[string]json.RawMessage `json:"panels"`
				}
				require.NoError(t, json.Unmarshal(readEventData(t, resp.Body), &f))
				assert.JSONEq(t, `{"hits":9}`, string(f.Panels["counter"]))
			})
		}
	}
}

// readEventData reads the data of the first unnamed event (a frame) of a Server-Sent
// Events stream, skipping the "history" event.
func readEventData(t *testing.T, r io.Reader) []byte {
	t.Helper()
	_, data := nextEvent(t, bufio.NewReader(r), "")
	return data
}

// With accounting off the engine has no loop, routes or tasks sections: those pages are
// 404 and Take leaves them zero, while admission, offload and the features' sections are
// served as usual.
func TestPagesWithoutAccounting(t *testing.T) {
	s, addr := startServer(t, loop.Config{NoAccounting: true}, func(s *loop.Server) {
		Mount(s, "/debug/baton")
		s.Handle("GET /x", func(c *loop.Ctx) { c.String(200, "x") })
	})
	resp, _ := dial(t, addr).Get("/x")
	mustStatus(t, resp, 200)
	for page, code := range map[string]int{"loop": 404, "routes": 404, "tasks": 404, "admission": 200, "offload": 200} {
		got, _ := getJSON(t, "http://"+addr+"/debug/baton/"+page)
		assert.Equal(t, code, got, page)
	}
	snap, err := Take(context.Background(), s, AllViews)
	require.NoError(t, err)
	assert.Zero(t, snap.Loop.Uptime)
	assert.Nil(t, snap.Routes)
	assert.GreaterOrEqual(t, snap.Admission.Parsed, uint64(1))
	assert.Positive(t, snap.Offload.Pool.Tokens)
}
