package looptest_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

func TestStartServesAndShutsDown(t *testing.T) {
	s := loop.New(looptest.Config(t, loop.Config{}))
	s.Handle("GET /hello", func(c *loop.Ctx) { c.String(200, "hi") })
	url := looptest.Start(t, s)
	resp, err := http.Get(url + "/hello")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "hi", string(body))
	http.DefaultClient.CloseIdleConnections()
}
