package httpapi

import (
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/wire"
)

// MaxBodyBytes caps a request body: a larger one is refused 413, with the
// error body naming the field "body" (wire.ReadBody).
const MaxBodyBytes = wire.MaxBodyBytes

// readBody is wire.ReadBody: at most MaxBodyBytes, of valid text.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) { return wire.ReadBody(w, r) }

// bodyBufs hold the buffers of the check route's bodies, which it keeps
// nothing of once decoded.
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// readPooledBody is wire.ReadBodyInto a buffer of bodyBufs, which
// releaseBody returns. The text is not checked: wire.DecodeCheck does.
func readPooledBody(w http.ResponseWriter, r *http.Request) (*[]byte, []byte, error) {
	bp := bodyBufs.Get().(*[]byte)
	if cap(*bp) == 0 {
		*bp = make([]byte, 0, 1024)
	}
	body, err := wire.ReadBodyInto(w, r, (*bp)[:0])
	return bp, body, err
}

// releaseBody returns a body's buffer to bodyBufs, but for a large one.
func releaseBody(bp *[]byte, body []byte) {
	if cap(body) <= 16<<10 {
		*bp = body[:0]
		bodyBufs.Put(bp)
	}
}
