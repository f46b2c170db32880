package wire

import (
	"fmt"
	"net/http"
	"time"
)

// The headers of a proxied call, ANY /v1/upstreams/{name}/proxy/{path...}:
// the caller names its customer and the call's cost and wait in these, as
// an acquire names them in its body; none of them is forwarded.
const (
	HeaderTenant  = "Sluice-Tenant"   // the tenant, which a tenant's key may omit
	HeaderKey     = "Sluice-Key"      // the customer within the tenant, required
	HeaderCost    = "Sluice-Cost"     // the call's cost, default 1
	HeaderMaxWait = "Sluice-Max-Wait" // the longest wait, a Go duration ("2s"); default the upstream's
)

// The headers Sluice adds to a proxied call's answer: when the call was
// granted on the server's clock (RFC 3339, nanoseconds) and how long it
// waited, in milliseconds, on every answer after a grant; when the server
// started sending it, on the upstream's answers; and, on an
// answer of Sluice's own rather than the upstream's (a ProxyFailure), its
// code, so that a client tells Sluice's 502 from the upstream's.
const (
	HeaderGrantedAt  = "Sluice-Granted-At"
	HeaderWaitedMs   = "Sluice-Waited-Ms"
	HeaderSentAt     = "Sluice-Sent-At"
	HeaderProxyError = "Sluice-Proxy-Error"
)

// ReasonBusy refuses a proxied call (429) when the upstream's calls in
// flight on the server, or the tenant's, are at their bound.
const ReasonBusy = "busy"

// The codes of a proxied call that Sluice could not complete, in a
// ProxyFailure body.
const (
	// ProxyFailed (502): the upstream could not be reached, or answered
	// something Sluice does not pass on (a response over the size bound,
	// a protocol switch).
	ProxyFailed = "upstream_failed"
	// ProxyTimeout (504): the upstream did not answer within its timeout.
	ProxyTimeout = "upstream_timeout"
	// ProxySlotMissed (503, Retry-After 1): the call was granted, but the
	// server could not start sending it within its time (the upstream's
	// margin), so it sent nothing rather than arrive out of pace. Its
	// units are spent; trying again is safe.
	ProxySlotMissed = "upstream_slot_missed"
)

// ProxyFailure is the body of a proxied call that Sluice could not
// complete, naming the upstream.
type ProxyFailure struct {
	Error    string `json:"error"`
	Message  string `json:"message"`
	Upstream string `json:"upstream"`
}

// proxyStatus is the status of each ProxyFailure code.
var proxyStatus = map[string]int{
	ProxyFailed:     http.StatusBadGateway,
	ProxyTimeout:    http.StatusGatewayTimeout,
	ProxySlotMissed: http.StatusServiceUnavailable,
}

// WriteProxyFailure answers a proxied call Sluice could not complete, with
// code's status (502 for an unknown code) and a ProxyFailure body. msg is
// shown to the caller: it must not hold the upstream's address.
func WriteProxyFailure(w http.ResponseWriter, upstream, code, msg string) {
	status, ok := proxyStatus[code]
	if !ok {
		status = http.StatusBadGateway
	}
	if code == ProxySlotMissed {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set(HeaderProxyError, code)
	WriteJSON(w, status, ProxyFailure{Error: code, Message: msg, Upstream: upstream})
}

// WriteProxyBusy refuses a proxied call (429, Retry-After 1, reason
// ReasonBusy) when too many calls to the upstream are in flight; who says
// whose bound: "server" or "tenant".
func WriteProxyBusy(w http.ResponseWriter, upstream, who string) {
	w.Header().Set("Retry-After", "1")
	WriteJSON(w, http.StatusTooManyRequests, UpstreamShort{
		Error: UpstreamShortCode, Upstream: upstream, Reason: ReasonBusy, RetryAfterMs: time.Second.Milliseconds(),
		Message: fmt.Sprintf("the upstream is busy: the %s's calls in flight to it are at their bound", who),
	})
}
