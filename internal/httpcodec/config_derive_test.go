package httpcodec

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRequestLineLimitFollowsHeaderLimit (issue 27, item 18): a MaxHeaderBytes below the
// default request-line limit was refused unless MaxRequestLineBytes was lowered too, and no
// environment variable sets that one, so BATON_MAX_HEADER_BYTES=4096 could not start. Left
// at zero, the request-line limit is now derived: the default, or MaxHeaderBytes if smaller.
// One set explicitly above MaxHeaderBytes is still an error.
func TestRequestLineLimitFollowsHeaderLimit(t *testing.T) {
	c := Config{MaxHeaderBytes: 4096}
	require.NoError(t, c.Validate())
	assert.Equal(t, 4096, c.normalized().MaxRequestLineBytes)

	var p Parser
	p.Init(c)
	var req Request
	long := "GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	_, err := p.ParseHead([]byte(long), &req)
	var perr *Error
	require.True(t, errors.As(err, &perr), "a head over 4096 bytes: %v", err)
	assert.Contains(t, []int{414, 431}, perr.Status)
	p.Init(c)
	n, err := p.ParseHead([]byte("GET /"+strings.Repeat("a", 3000)+" HTTP/1.1\r\nHost: x\r\n\r\n"), &req)
	require.NoError(t, err)
	assert.Positive(t, n)

	err = Config{MaxRequestLineBytes: 8192, MaxHeaderBytes: 4096}.Validate()
	require.Error(t, err, "an explicit request-line limit above the head's is still refused")
	assert.Equal(t, "httpcodec: Config.MaxRequestLineBytes (8192) must not exceed MaxHeaderBytes (4096)", err.Error())
}
