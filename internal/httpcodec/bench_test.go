package httpcodec

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// benchGET is a typical browser GET of about 300 bytes.
var benchGET = []byte("GET /static/js/app.3f9c2b.js?v=20240611 HTTP/1.1\r\n" +
	"Host: www.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
	"Accept: */*\r\n" +
	"Accept-Language: en-US,en;q=0.5\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\n" +
	"Referer: https://www.example.com/\r\n" +
	"Connection: keep-alive\r\n" +
	"Cookie: sid=9f8e7d6c5b4a\r\n" +
	"\r\n")

// benchPOST is an API POST with 12 headers and a small JSON body.
var benchPOST = []byte("POST /api/v1/orders?dry_run=false HTTP/1.1\r\n" +
	"Host: api.example.com\r\n" +
	"User-Agent: example-client/2.4.1 (linux; go1.26)\r\n" +
	"Accept: application/json\r\n" +
	"Accept-Encoding: gzip\r\n" +
	"Content-Type: application/json; charset=utf-8\r\n" +
	"Content-Length: 89\r\n" +
	"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl\r\n" +
	"X-Request-Id: 4b1e6f3a-7c2d-4e8f-9a0b-1c2d3e4f5a6b\r\n" +
	"X-Forwarded-For: 203.0.113.7\r\n" +
	"X-Forwarded-Proto: https\r\n" +
	"Idempotency-Key: 7f3c9a12-b4d6-4e8a-9c01-23456789abcd\r\n" +
	"Connection: keep-alive\r\n" +
	"\r\n" +
	`{"customer_id":12345,"items":[{"sku":"A-100","qty":2},{"sku":"B-7","qty":1}],"ship":true}`)

// benchChunked is a POST with a 4 KiB body sent as eight 512-byte chunks.
var benchChunked = func() []byte {
	var b bytes.Buffer
	b.WriteString("POST /upload HTTP/1.1\r\nHost: api.example.com\r\n" +
		"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 32)
	for range 8 {
		b.Write(AppendChunk(nil, chunk))
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}()

func init() {
	if len(benchPOST)-strings.Index(string(benchPOST), "\r\n\r\n")-4 != 89 {
		panic("benchPOST: body length does not match Content-Length")
	}
}

func benchParse(b *testing.B, in []byte) {
	var p Parser
	var req Request
	var d BodyDecoder
	body := make([]byte, 0, 8192)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		n, err := p.ParseHead(in, &req)
		if err != nil {
			b.Fatal(err)
		}
		if req.ContentLength > 0 || req.Chunked {
			d.Init(&req, Config{})
			m, _, done, err := d.Decode(in[n:], body[:0])
			if err != nil || !done || n+m != len(in) {
				b.Fatal("body", err, done)
			}
		}
	}
}

func benchStdlib(b *testing.B, in []byte) {
	rd := bytes.NewReader(in)
	br := bufio.NewReader(rd)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(in)
		br.Reset(rd)
		req, err := http.ReadRequest(br)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseGET(b *testing.B)      { benchParse(b, benchGET) }
func BenchmarkStdlibGET(b *testing.B)     { benchStdlib(b, benchGET) }
func BenchmarkParsePOST(b *testing.B)     { benchParse(b, benchPOST) }
func BenchmarkStdlibPOST(b *testing.B)    { benchStdlib(b, benchPOST) }
func BenchmarkParseChunked(b *testing.B)  { benchParse(b, benchChunked) }
func BenchmarkStdlibChunked(b *testing.B) { benchStdlib(b, benchChunked) }

// BenchmarkParseGETIncremental feeds the GET one 16-byte read at a time.
func BenchmarkParseGETIncremental(b *testing.B) {
	var p Parser
	var req Request
	b.SetBytes(int64(len(benchGET)))
	b.ReportAllocs()
	for b.Loop() {
		for i := 16; ; i += 16 {
			i = min(i, len(benchGET))
			_, err := p.ParseHead(benchGET[:i], &req)
			if err == nil {
				break
			}
			if err != ErrNeedMore {
				b.Fatal(err)
			}
		}
	}
}

var benchRespBody = []byte(`{"id":12345,"status":"created"}`)

func BenchmarkWriteResponse(b *testing.B) {
	var date Date
	date.Update(time.Date(2024, 6, 11, 9, 30, 0, 0, time.UTC))
	h := ResponseHead{
		Status: 200,
		Headers: []Header{
			{Name: []byte("Content-Type"), Value: []byte("application/json")},
			{Name: []byte("Server"), Value: []byte("baton")},
			{Name: []byte("X-Request-Id"), Value: []byte("4b1e6f3a-7c2d-4e8f-9a0b-1c2d3e4f5a6b")},
		},
		ContentLength: int64(len(benchRespBody)),
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		h.Date = date.Bytes()
		out, err := AppendResponseHead(buf[:0], &h)
		if err != nil {
			b.Fatal(err)
		}
		buf = append(out, benchRespBody...)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkWriteResponseChunked(b *testing.B) {
	h := ResponseHead{
		Status:  200,
		Headers: []Header{{Name: []byte("Content-Type"), Value: []byte("text/plain")}},
		Chunked: true,
	}
	chunk := bytes.Repeat([]byte("x"), 512)
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		out, err := AppendResponseHead(buf[:0], &h)
		if err != nil {
			b.Fatal(err)
		}
		for range 4 {
			out = AppendChunk(out, chunk)
		}
		buf = AppendFinalChunk(out)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkStdlibWriteResponse is the net/http counterpart of
// BenchmarkWriteResponse: http.Response.Write of the same head and body.
func BenchmarkStdlibWriteResponse(b *testing.B) {
	resp := &http.Response{
		StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Server":       {"baton"},
			"X-Request-Id": {"4b1e6f3a-7c2d-4e8f-9a0b-1c2d3e4f5a6b"},
			"Date":         {"Tue, 11 Jun 2024 09:30:00 GMT"},
		},
		ContentLength: int64(len(benchRespBody)),
	}
	var buf bytes.Buffer
	rd := bytes.NewReader(benchRespBody)
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		rd.Reset(benchRespBody)
		resp.Body = io.NopCloser(rd)
		if err := resp.Write(&buf); err != nil {
			b.Fatal(err)
		}
	}
}
