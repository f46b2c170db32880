package gateway

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestHandlerReturnsOnUpgrade: the connect's handler returns once the
// connection is upgraded, and the connection is served on: an idle
// connection holds its reader's stack alone, not the HTTP server's
// handler and the request it read. Messages larger than the connection's
// buffers, both ways, are echoed whole. Before, the handler served the
// connection until it closed.
func TestHandlerReturnsOnUpgrade(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	returned := make(chan struct{}, 1)
	f.srv.Close()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.g.ServeHTTP(w, r)
		returned <- struct{}{}
	}))
	f.session(t, "s1")
	ws := f.mustDial(t, "acme", "s1")
	defer ws.Close(websocket.StatusNormalClosure, "")
	select {
	case <-returned:
	case <-time.After(patience):
		t.Fatal("the connect's handler did not return while its connection was open")
	}
	data := strings.Repeat("y", 3*max(readBuffer, writeBuffer))
	write(t, ws, `{"action":"silo","data":"`+data+`","id":"m1"}`)
	if m := read(t, ws); m["type"] != "echo" || m["data"] != data {
		t.Fatalf("echo of a message larger than the buffers: %.80v", m)
	}
	write(t, ws, `{"action":"silo","data":"small","id":"m2"}`)
	if m := read(t, ws); m["type"] != "echo" || m["data"] != "small" {
		t.Fatalf("echo %v", m)
	}
}

// TestBytesAfterTheUpgradeRequestRead: frames the client sends in the
// same packet as its upgrade request, which the HTTP server has read
// already, are the connection's first messages, in order: one frame, and
// frames of more bytes than the connection's read buffer.
func TestBytesAfterTheUpgradeRequestRead(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	req := func(nc net.Conn) string {
		var key [16]byte
		rand.Read(key[:])
		return "GET /v1/ws?tenant=acme&session=s1 HTTP/1.1\r\nHost: " + nc.RemoteAddr().String() +
			"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
			base64.StdEncoding.EncodeToString(key[:]) + "\r\n\r\n"
	}
	for _, frames := range []int{1, readBuffer/100 + 2} {
		t.Run(fmt.Sprint(frames), func(t *testing.T) {
			nc, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(patience))
			b := []byte(req(nc))
			for i := range frames {
				data := fmt.Sprintf("%03d%s", i, strings.Repeat("e", 60))
				b = append(b, maskedText([]byte(`{"action":"silo","data":"`+data+`"}`))...)
			}
			if _, err := nc.Write(b); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(nc)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			for i := range frames {
				var m map[string]any
				if err := json.Unmarshal(readServerFrame(t, br), &m); err != nil || m["type"] != "echo" || !strings.HasPrefix(fmt.Sprint(m["data"]), fmt.Sprintf("%03d", i)) {
					t.Fatalf("frame %d: %v %v, want the echo of frame %d sent with the request", i, m, err, i)
				}
			}
		})
	}
}

// maskedText is a client's text frame of p, masked.
func maskedText(p []byte) []byte {
	if len(p) > 125 {
		panic("maskedText: a short frame only")
	}
	var mask [4]byte
	rand.Read(mask[:])
	b := append([]byte{0x81, 0x80 | byte(len(p))}, mask[:]...)
	for i, c := range p {
		b = append(b, c^mask[i%4])
	}
	return b
}

// readServerFrame reads one unmasked, unfragmented frame's payload.
func readServerFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatal(err)
	}
	if h[0] != 0x81 || h[1]&0x80 != 0 {
		t.Fatalf("frame header % x, want an unmasked final text frame", h)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			t.Fatal(err)
		}
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			t.Fatal(err)
		}
		n = binary.BigEndian.Uint64(x[:])
	}
	if n > 1<<20 {
		t.Fatalf("frame of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return p
}
