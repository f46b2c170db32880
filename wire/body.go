package wire

import (
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
)

// MaxBodyBytes caps a request body: a larger one is refused 413, with the
// error body naming the field "body" (ErrBodyTooLarge).
const MaxBodyBytes = 64 << 10

// maxDrainBytes bounds what the server reads of a body it refuses as too
// large (drainRefused).
const maxDrainBytes = 16 << 20

// ErrBodyTooLarge refuses a body over MaxBodyBytes: an invalid request,
// which WriteError answers 413 rather than 400.
var ErrBodyTooLarge = sluice.Invalid("body", "exceeds %d bytes", MaxBodyBytes)

// ReadBody reads at most MaxBodyBytes of r's body, and refuses text that
// JSON would not carry as it is (ValidateText): invalid UTF-8, or an
// escaped lone surrogate, which encoding/json silently turns into U+FFFD,
// so that keys "\xff" and "\xfe" would share one counter.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := ReadBodyInto(w, r, make([]byte, 0, 512))
	if err == nil {
		err = ValidateText(b)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ReadBodyInto reads at most MaxBodyBytes of r's body, appending to b as
// io.ReadAll would; ReadBody without the check of its text. A longer body
// is ErrBodyTooLarge, and drained (drainRefused).
func ReadBodyInto(w http.ResponseWriter, r *http.Request, b []byte) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		drainRefused(w, r, false)
		return b, ErrBodyTooLarge
	}
	start := len(b)
	rd := io.LimitReader(r.Body, MaxBodyBytes+1)
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b)-start > MaxBodyBytes {
			drainRefused(w, r, true)
			return b, ErrBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, sluice.Invalid("body", "could not be read: %v", err)
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // room to read on
		}
	}
	return b, nil
}

// drainRefused reads and discards the rest of the body of a request
// refused as too large, up to maxDrainBytes, before the answer. Most
// clients send the whole body before they read the answer, and a server
// that closes a connection with data unread resets it (net/http closes
// one whose body is left unread past a few hundred KiB): the reset
// discards the answer the client has not read yet, which then sees
// "connection reset by peer" instead of the 413. Drained, the connection
// even stays open for the next request. read reports whether any of the
// body was read: a client that asked to be told first (Expect:
// 100-continue) and was told nothing has sent nothing, and is answered at
// once. A body declared over maxDrainBytes is not read, nor one past it:
// the connection closes after the answer, and a client still sending may
// see the reset.
func drainRefused(w http.ResponseWriter, r *http.Request, read bool) {
	if !read && (r.ContentLength > maxDrainBytes || strings.EqualFold(r.Header.Get("Expect"), "100-continue")) {
		w.Header().Set("Connection", "close")
		return
	}
	if _, err := io.CopyN(io.Discard, r.Body, maxDrainBytes); err != io.EOF {
		w.Header().Set("Connection", "close")
	}
}
