package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// rawConn is a client on one connection that sends a request whole
// before it reads the answer, as most clients do (Python's http.client,
// curl without Expect, a form's POST): what it sees when a server cuts a
// request off, it reports.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(patience))
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// send writes head (the request line and headers, without the blank line
// that ends them) and then body, all of it, and reads the answer: its
// status and JSON body, or an error for what went wrong on the way.
func (c *rawConn) send(head string, body io.Reader) (int, map[string]any, error) {
	if _, err := io.WriteString(c.conn, head+"\r\n\r\n"); err != nil {
		return 0, nil, fmt.Errorf("writing the head: %w", err)
	}
	if body != nil {
		if _, err := io.Copy(c.conn, body); err != nil {
			return 0, nil, fmt.Errorf("writing the body: %w", err)
		}
	}
	return c.read()
}

func (c *rawConn) read() (int, map[string]any, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading the answer's body: %w", err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("the answer is not JSON: %q", b)
	}
	return resp.StatusCode, out, nil
}

// chunked is body in HTTP/1.1 chunks of 32 KiB.
func chunked(body []byte) io.Reader {
	var b bytes.Buffer
	for len(body) > 0 {
		n := min(len(body), 32<<10)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return &b
}

// TestBodyTooLarge: a body over 64 KiB is answered 413 with the JSON error
// naming the body, to a client that sends it all before it reads: the
// server reads the rest, up to 16 MiB, rather than close the connection
// under the client, whose reset would discard the answer. Drained, the
// connection serves the next request. A client that waits for "100
// Continue" is answered at once, and sends nothing.
func TestBodyTooLarge(t *testing.T) {
	p := start(t, "--store", "memory")
	big := bytes.Repeat([]byte("x"), 10<<20)
	is413 := func(t *testing.T, what string, status int, out map[string]any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if status != http.StatusRequestEntityTooLarge || out["error"] != "invalid_request" || out["field"] != "body" {
			t.Fatalf("%s: %d %v, want 413 naming the body", what, status, out)
		}
	}
	for _, tc := range []struct {
		name, path string
		size       int
		chunked    bool
	}{
		{"10 MiB tenant", "/v1/tenants", 10 << 20, false},
		{"4 MiB management post", "/v1/tenants/acme/connections/c1", 4 << 20, false},
		{"4 MiB check, chunked", "/v1/check", 4 << 20, true},
		{"65 KiB check", "/v1/check", 65 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, p.addr)
			head := "POST " + tc.path + " HTTP/1.1\r\nHost: " + p.addr + "\r\nContent-Type: application/json"
			var body io.Reader = bytes.NewReader(big[:tc.size])
			if tc.chunked {
				head += "\r\nTransfer-Encoding: chunked"
				body = chunked(big[:tc.size])
			} else {
				head += fmt.Sprintf("\r\nContent-Length: %d", tc.size)
			}
			status, out, err := c.send(head, body)
			is413(t, tc.path, status, out, err)
			status, out, err = c.send("GET /healthz HTTP/1.1\r\nHost: "+p.addr, nil)
			if err != nil || status != 200 {
				t.Fatalf("the next request on the connection: %d %v %v", status, out, err)
			}
		})
	}
	t.Run("Expect: 100-continue", func(t *testing.T) {
		c := dialRaw(t, p.addr)
		status, out, err := c.send(fmt.Sprintf("POST /v1/tenants HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d", p.addr, 10<<20), nil)
		is413(t, "before the body", status, out, err)
	})
}

// TestUnknownFieldNamedByItsPath: a member that no field takes, deep in a
// body, is named by its whole path.
func TestUnknownFieldNamedByItsPath(t *testing.T) {
	p := start(t, "--store", "memory")
	const policy = `{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s"}`
	for body, field := range map[string]string{
		`{"tenant":"acme","checks":[{"policy":` + policy + `},{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"windw":"60s"}}]}`: "checks[1].policy.windw",
		`{"tenant":"acme","checks":[{"key":"k","policy":` + policy + `,"kye":"k"}]}`:                                                        "checks[0].kye",
	} {
		if code, out := p.call(t, "", "POST", "/v1/check", body); code != 400 || out["field"] != field {
			t.Errorf("%s: %d %v, want 400 naming %s", body, code, out, field)
		}
	}
	if code, out := p.call(t, "", "POST", "/v1/tenants", `{"id":"acme","overrides":{"chat":{"limit":3,"windw":"1s"}}}`); code != 400 || out["field"] != "overrides.chat.windw" {
		t.Errorf("tenant: %d %v, want 400 naming overrides.chat.windw", code, out)
	}
}
