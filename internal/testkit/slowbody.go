package testkit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// SlowBody is the client on a bad network: it POSTs to path on addr with
// the idempotency key, announces a body of a megabyte, sends only partial,
// and waits (10 s at most) for the server to give up on the rest. It
// returns the status the server answered and whether the server then
// closed the connection, as it must for a body it never read to the end.
func SlowBody(addr, path, key, partial string) (status int, closed bool, err error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, false, err
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n%s", path, key, partial); err != nil {
		return 0, false, err
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, false, fmt.Errorf("no answer before the client's own deadline: %w", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	_, err = br.ReadByte()
	return res.StatusCode, err == io.EOF, nil
}
