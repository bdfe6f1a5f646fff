package httpcodec

import "strconv"

// Default limits, used for the zero (or negative) fields of a Config.
const (
	// DefaultMaxRequestLineBytes bounds the request line, CRLF included.
	// 8 KiB is what nginx, Apache and most proxies allow for a request line;
	// longer URIs are almost always attacks or bugs. Over it: 414.
	DefaultMaxRequestLineBytes = 8 << 10

	// DefaultMaxHeaderBytes bounds the whole request head: request line,
	// fields and the final empty line. 64 KiB covers the largest cookie
	// sets seen in practice (nginx's default is 4 x 8 KiB buffers, Go's
	// net/http allows 1 MiB) while keeping the per-connection buffer small.
	// Over it: 431. It also bounds the trailer section of a chunked body.
	DefaultMaxHeaderBytes = 64 << 10

	// DefaultMaxHeaderCount bounds the number of header fields. Browsers
	// send 10-20; 100 is Apache's LimitRequestFields default and stops
	// attacks that send many tiny fields. Over it: 431. It also bounds the
	// number of trailer fields.
	DefaultMaxHeaderCount = 100

	// DefaultMaxBodyBytes bounds a request body. 8 MiB is enough for the
	// JSON and form posts the server is meant for; larger uploads should
	// raise it explicitly. A declared Content-Length over it is answered
	// with 413 before the body is read; a chunked body gets 413 as soon as
	// a chunk size would take it over.
	DefaultMaxBodyBytes = 8 << 20

	// DefaultMaxChunkLineBytes bounds one chunk-size line of a chunked body
	// (size, extensions and CRLF). Chunk extensions are discarded, so there
	// is no reason to accept long ones; 4 KiB matches net/http. Over it: 400.
	DefaultMaxChunkLineBytes = 4 << 10

	// DefaultMaxWSMessageBytes bounds a WebSocket message (all its
	// fragments) read by a WSReader. 1 MiB is far above what game and chat
	// protocols send and keeps a malicious client from making the server
	// buffer much per connection. Over it: close code 1009.
	DefaultMaxWSMessageBytes = 1 << 20
)

// Config holds the limits of a Parser and a BodyDecoder. The zero value
// gives the documented defaults; a zero field means "use the default".
// Validate reports the fields that are out of range; Parser.Init and
// BodyDecoder.Init do not return errors, so call Validate first (an
// unvalidated negative field is treated as zero and an unvalidated
// MaxHeaderBytes above MaxHeadBytesLimit is clamped to it). A Config is a
// plain value; copying it is fine.
type Config struct {
	// MaxRequestLineBytes bounds the request line including its CRLF; a
	// longer line is answered with 414. Set, it must not exceed
	// MaxHeaderBytes (its default counted). 0 means
	// DefaultMaxRequestLineBytes, or MaxHeaderBytes where that is smaller.
	MaxRequestLineBytes int

	// MaxHeaderBytes bounds the whole head, request line and final CRLF
	// included; more is answered with 431. It also bounds the trailer
	// section of a chunked body. At most MaxHeadBytesLimit.
	// 0 means DefaultMaxHeaderBytes.
	MaxHeaderBytes int

	// MaxHeaderCount bounds the number of header fields (and of trailer
	// fields); more is answered with 431. 0 means DefaultMaxHeaderCount.
	MaxHeaderCount int

	// MaxBodyBytes bounds the decoded body. A declared Content-Length over
	// it makes ParseHead answer 413 before any body byte is read; a
	// chunked body whose next chunk would take it over makes Decode answer
	// 413. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// MaxChunkLineBytes bounds a chunk-size line (size, extensions, CRLF)
	// of a chunked body; a longer one is answered with 400.
	// 0 means DefaultMaxChunkLineBytes.
	MaxChunkLineBytes int

	// MaxWSMessageBytes bounds a WebSocket message read by a WSReader, all
	// fragments together; a message whose next frame would take it over
	// is refused with close code 1009 as soon as the frame's length has
	// arrived. 0 means DefaultMaxWSMessageBytes.
	MaxWSMessageBytes int64

	// MaxWSFrameBytes bounds the payload of one WebSocket data frame read
	// by a WSReader (the caller buffers a whole frame before it is
	// parsed); over it: 1009. Control frames are bounded by 125 bytes
	// whatever it says. It must not exceed MaxWSMessageBytes.
	// 0 means MaxWSMessageBytes.
	MaxWSFrameBytes int64
}

// normalized returns c with defaults filled in and MaxRequestLineBytes
// capped at MaxHeaderBytes.
func (c Config) normalized() Config {
	if c.MaxRequestLineBytes <= 0 {
		c.MaxRequestLineBytes = DefaultMaxRequestLineBytes
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxHeaderCount <= 0 {
		c.MaxHeaderCount = DefaultMaxHeaderCount
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxChunkLineBytes <= 0 {
		c.MaxChunkLineBytes = DefaultMaxChunkLineBytes
	}
	if c.MaxRequestLineBytes > c.MaxHeaderBytes {
		c.MaxRequestLineBytes = c.MaxHeaderBytes
	}
	if c.MaxWSMessageBytes <= 0 {
		c.MaxWSMessageBytes = DefaultMaxWSMessageBytes
	}
	if c.MaxWSFrameBytes <= 0 || c.MaxWSFrameBytes > c.MaxWSMessageBytes {
		c.MaxWSFrameBytes = c.MaxWSMessageBytes
	}
	return c
}

// MaxHeadBytesLimit is the largest MaxHeaderBytes Validate accepts: offsets
// into a head are kept small enough to fit in 31 bits.
const MaxHeadBytesLimit = 1 << 30

// ConfigError is a Config field Validate rejects. Field is the field's name
// as written in Config ("MaxHeaderBytes"); Reason says what is wrong with
// it, starting with the rule ("must not be negative, got -1"). A package
// embedding a Config can report the field under its own path:
// "loop: Config.Limits." + e.Field + " " + e.Reason.
type ConfigError struct {
	Field  string
	Reason string
}

// Error returns "httpcodec: Config.<Field> <Reason>", for example
// "httpcodec: Config.MaxHeaderBytes must not be negative, got -1".
func (e *ConfigError) Error() string {
	return "httpcodec: Config." + e.Field + " " + e.Reason
}

// Validate reports the first field of c that is out of range as a
// *ConfigError, or nil. Zero fields are fine (they take their defaults);
// negative fields, a MaxHeaderBytes above MaxHeadBytesLimit, a
// MaxRequestLineBytes set above MaxHeaderBytes (its default counted), and a
// MaxWSFrameBytes above MaxWSMessageBytes are errors.
// It may be called from any goroutine.
func (c Config) Validate() error {
	neg := func(field string, v int64) error {
		if v < 0 {
			return &ConfigError{Field: field, Reason: "must not be negative, got " + strconv.FormatInt(v, 10)}
		}
		return nil
	}
	for _, err := range []error{
		neg("MaxRequestLineBytes", int64(c.MaxRequestLineBytes)),
		neg("MaxHeaderBytes", int64(c.MaxHeaderBytes)),
		neg("MaxHeaderCount", int64(c.MaxHeaderCount)),
		neg("MaxBodyBytes", c.MaxBodyBytes),
		neg("MaxChunkLineBytes", int64(c.MaxChunkLineBytes)),
		neg("MaxWSMessageBytes", c.MaxWSMessageBytes),
		neg("MaxWSFrameBytes", c.MaxWSFrameBytes),
	} {
		if err != nil {
			return err
		}
	}
	if c.MaxHeaderBytes > MaxHeadBytesLimit {
		return &ConfigError{Field: "MaxHeaderBytes", Reason: "must be at most " +
			strconv.Itoa(MaxHeadBytesLimit) + ", got " + strconv.Itoa(c.MaxHeaderBytes)}
	}
	if rl := c.MaxRequestLineBytes; rl > 0 { // 0 follows a smaller MaxHeaderBytes down (normalized)
		hb := c.MaxHeaderBytes
		if hb == 0 {
			hb = DefaultMaxHeaderBytes
		}
		if rl > hb {
			return &ConfigError{Field: "MaxRequestLineBytes", Reason: "(" + strconv.Itoa(rl) +
				") must not exceed MaxHeaderBytes (" + strconv.Itoa(hb) + defaultNote(c.MaxHeaderBytes) + ")"}
		}
	}
	if c.MaxWSFrameBytes > 0 {
		msg := c.MaxWSMessageBytes
		if msg == 0 {
			msg = DefaultMaxWSMessageBytes
		}
		if c.MaxWSFrameBytes > msg {
			return &ConfigError{Field: "MaxWSFrameBytes", Reason: "(" + strconv.FormatInt(c.MaxWSFrameBytes, 10) +
				") must not exceed MaxWSMessageBytes (" + strconv.FormatInt(msg, 10) + defaultNote(int(c.MaxWSMessageBytes)) + ")"}
		}
	}
	return nil
}

func defaultNote(v int) string {
	if v == 0 {
		return ", the default"
	}
	return ""
}
