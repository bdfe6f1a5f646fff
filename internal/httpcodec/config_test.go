package httpcodec

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	ok := []Config{
		{},
		{MaxRequestLineBytes: 100, MaxHeaderBytes: 100, MaxHeaderCount: 1, MaxBodyBytes: 1, MaxChunkLineBytes: 1},
		{MaxHeaderBytes: MaxHeadBytesLimit},
		{MaxRequestLineBytes: DefaultMaxHeaderBytes},
		{MaxHeaderBytes: 4096}, // the request-line limit follows it down (TestRequestLineLimitFollowsHeaderLimit)
	}
	for _, c := range ok {
		assert.NoError(t, c.Validate(), "%+v", c)
	}
	bad := []struct {
		cfg   Config
		field string
		msg   string
	}{
		{Config{MaxHeaderBytes: -1}, "MaxHeaderBytes", "httpcodec: Config.MaxHeaderBytes must not be negative, got -1"},
		{Config{MaxRequestLineBytes: -5}, "MaxRequestLineBytes", "httpcodec: Config.MaxRequestLineBytes must not be negative, got -5"},
		{Config{MaxHeaderCount: -1}, "MaxHeaderCount", "httpcodec: Config.MaxHeaderCount must not be negative, got -1"},
		{Config{MaxBodyBytes: -7}, "MaxBodyBytes", "httpcodec: Config.MaxBodyBytes must not be negative, got -7"},
		{Config{MaxChunkLineBytes: -1}, "MaxChunkLineBytes", "httpcodec: Config.MaxChunkLineBytes must not be negative, got -1"},
		{Config{MaxHeaderBytes: MaxHeadBytesLimit + 1}, "MaxHeaderBytes", "httpcodec: Config.MaxHeaderBytes must be at most 1073741824, got 1073741825"},
		{Config{MaxRequestLineBytes: 200, MaxHeaderBytes: 100}, "MaxRequestLineBytes", "httpcodec: Config.MaxRequestLineBytes (200) must not exceed MaxHeaderBytes (100)"},
		{Config{MaxRequestLineBytes: 1 << 20}, "MaxRequestLineBytes", "httpcodec: Config.MaxRequestLineBytes (1048576) must not exceed MaxHeaderBytes (65536, the default)"},
	}
	for _, b := range bad {
		err := b.cfg.Validate()
		require.Error(t, err, "%+v", b.cfg)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce))
		assert.Equal(t, b.field, ce.Field)
		assert.Equal(t, b.msg, err.Error())
		assert.Equal(t, "httpcodec: Config."+ce.Field+" "+ce.Reason, err.Error())
	}
}
