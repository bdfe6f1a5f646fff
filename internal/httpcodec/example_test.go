package httpcodec_test

import (
	"fmt"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
)

func Example_parse() {
	// Bytes as they might arrive on a connection: one request split over two
	// reads, followed by the start of a pipelined one.
	read1 := "POST /api/items?dry=1 HTTP/1.1\r\nHost: example.com\r\nContent-"
	read2 := "Length: 7\r\nX-Tag: a\r\nX-Tag: b\r\n\r\n{\"n\":1}GET / HTTP/1.1\r\n"

	var p httpcodec.Parser // zero value: default limits
	var req httpcodec.Request
	var d httpcodec.BodyDecoder

	buf := []byte(read1)
	_, err := p.ParseHead(buf, &req)
	fmt.Println(err == httpcodec.ErrNeedMore)

	buf = append(buf, read2...)
	n, err := p.ParseHead(buf, &req)
	if err != nil {
		fmt.Println("answer", err.(*httpcodec.Error).Status)
		return
	}
	fmt.Printf("%s %s path=%s query=%s host=%s keep-alive=%v\n",
		req.Method, req.Target, req.Path, req.RawQuery, req.Host, req.KeepAlive)
	tag, _ := req.Get("x-tag")
	fmt.Printf("headers=%d first x-tag=%s content-length=%d\n", len(req.Headers), tag, req.ContentLength)

	d.Init(&req, httpcodec.Config{})
	m, body, done, err := d.Decode(buf[n:], nil)
	fmt.Printf("body=%s done=%v err=%v\n", body, done, err)
	fmt.Printf("next request starts with %q\n", buf[n+m:n+m+3])
	// Output:
	// true
	// POST /api/items?dry=1 path=/api/items query=dry=1 host=example.com keep-alive=true
	// headers=4 first x-tag=a content-length=7
	// body={"n":1} done=true err=<nil>
	// next request starts with "GET"
}

func Example_parseError() {
	var p httpcodec.Parser
	var req httpcodec.Request
	_, err := p.ParseHead([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"), &req)
	if e, ok := err.(*httpcodec.Error); ok {
		fmt.Println(e.Status, httpcodec.StatusText(e.Status))
	}
	// Output:
	// 501 Not Implemented
}

func Example_response() {
	var date httpcodec.Date // refreshed once a second by the owner
	date.Update(time.Date(2024, 6, 11, 9, 30, 0, 0, time.UTC))

	body := []byte(`{"ok":true}`)
	h := httpcodec.ResponseHead{
		Status:        200,
		Headers:       []httpcodec.Header{{Name: []byte("Content-Type"), Value: []byte("application/json")}},
		ContentLength: int64(len(body)),
		Date:          date.Bytes(),
	}
	out, err := httpcodec.AppendResponseHead(nil, &h)
	if err != nil {
		panic(err)
	}
	out = append(out, body...)
	fmt.Printf("%q\n", out)

	// A streamed response, closing the connection afterwards.
	h = httpcodec.ResponseHead{Status: 200, Chunked: true, Close: true}
	out, _ = httpcodec.AppendResponseHead(out[:0], &h)
	out = httpcodec.AppendChunk(out, []byte("hello"))
	out = httpcodec.AppendFinalChunk(out)
	fmt.Printf("%q\n", out)

	// Header injection is refused.
	h.Headers = []httpcodec.Header{{Name: []byte("X"), Value: []byte("a\r\nSet-Cookie: x=1")}}
	_, err = httpcodec.AppendResponseHead(nil, &h)
	fmt.Println(err)
	// Output:
	// "HTTP/1.1 200 OK\r\nDate: Tue, 11 Jun 2024 09:30:00 GMT\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
	// "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	// httpcodec: invalid response header
}
