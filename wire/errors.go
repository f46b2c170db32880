package wire

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
)

// Error is the body of every error answer, from every transport:
// {"error": "<code>", "field": "<path>", "message": "..."}.
type Error struct {
	Error   string `json:"error"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// The gRPC status codes of the kinds (google.golang.org/grpc/codes, by
// their numbers, which gRPC fixes): named here so that wire, and the Go
// client that uses it, need not link gRPC.
const (
	grpcNotFound          = 5
	grpcAlreadyExists     = 6
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcInvalidArgument   = 3
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// kinds is the one table from error kinds to HTTP statuses, codes, and
// gRPC codes.
var kinds = [...]struct {
	status int
	code   string
	grpc   uint32
}{
	sluice.KindInternal:     {http.StatusInternalServerError, "internal", grpcInternal},
	sluice.KindInvalid:      {http.StatusBadRequest, "invalid_request", grpcInvalidArgument},
	sluice.KindNotFound:     {http.StatusNotFound, "not_found", grpcNotFound},
	sluice.KindUnavailable:  {http.StatusServiceUnavailable, "unavailable", grpcUnavailable},
	sluice.KindConflict:     {http.StatusConflict, "conflict", grpcAlreadyExists},
	sluice.KindUnauthorized: {http.StatusUnauthorized, "unauthorized", grpcUnauthenticated},
	sluice.KindForbidden:    {http.StatusForbidden, "forbidden", grpcPermissionDenied},
	sluice.KindGone:         {http.StatusGone, "gone", grpcNotFound},
	sluice.KindExhausted:    {http.StatusTooManyRequests, "exhausted", grpcResourceExhausted},
}

// GRPCCode returns the gRPC status code of an error of kind k, as
// google.golang.org/grpc/codes numbers it.
func GRPCCode(k sluice.Kind) uint32 { return kinds[known(k)].grpc }

// Status returns the HTTP status of an error of kind k.
func Status(k sluice.Kind) int { return kinds[known(k)].status }

// KindOfStatus returns the kind of an error answered with status: the
// inverse of Status, for clients. Statuses of no Sluice kind are internal,
// but for the gateway statuses of a proxy in front (502, 504), which are
// unavailable.
func KindOfStatus(status int) sluice.Kind {
	for k, v := range kinds {
		if v.status == status {
			return sluice.Kind(k)
		}
	}
	switch status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return sluice.KindUnavailable
	case http.StatusRequestEntityTooLarge:
		return sluice.KindInvalid // a body over the limit: the request's fault (its field is "body")
	}
	return sluice.KindInternal
}

// ErrorOf returns the body of err's answer: its kind's code, the field at
// fault, and the innermost Sluice error's message, without the chain of
// operations; an internal error's message is never shown.
func ErrorOf(err error) Error {
	k := sluice.KindOf(err)
	body := Error{Error: kinds[known(k)].code, Field: sluice.FieldOf(err), Message: message(err)}
	if k == sluice.KindInternal {
		body.Message = "internal error" // never leak internals
	}
	return body
}

// known returns k if it is a known kind, and KindInternal otherwise.
func known(k sluice.Kind) sluice.Kind {
	if int(k) < len(kinds) {
		return k
	}
	return sluice.KindInternal
}

// message is what a client is told of err: the innermost Sluice error's
// field and message, without the chain of operations. An error that has
// none, such as a store's own, is told by its kind only: its text may name
// endpoints, tables or paths.
func message(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if se, ok := e.(*sluice.Error); ok && se.Message != "" {
			return strings.TrimSpace(se.Field + " " + se.Message)
		}
	}
	switch sluice.KindOf(err) {
	case sluice.KindUnavailable:
		return "the store is unavailable; try again"
	case sluice.KindInternal:
		return "internal error"
	}
	return sluice.KindOf(err).String()
}

// WriteError answers err with its kind's status and the error body. An
// unavailable answer asks for a retry a second later. A body over
// MaxBodyBytes (ErrBodyTooLarge) is the one invalid input answered 413
// rather than 400, with the same body, naming the field "body".
func WriteError(w http.ResponseWriter, err error) {
	k := sluice.KindOf(err)
	status := Status(k)
	switch {
	case k == sluice.KindUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	case k == sluice.KindUnavailable:
		w.Header().Set("Retry-After", strconv.FormatInt(CeilSeconds(sluice.FailedRetry), 10))
	case errors.Is(err, ErrBodyTooLarge):
		status = http.StatusRequestEntityTooLarge
	}
	WriteJSON(w, status, ErrorOf(err))
}

// ParseError returns the error an error answer describes: a *sluice.Error
// of the status's kind, with the field and message the server gave.
func ParseError(op string, status int, body []byte) error {
	var e Error
	_ = json.Unmarshal(body, &e) // a proxy's page is not JSON: the status is enough
	// The body's message names the field first (message), which the
	// error's text does too.
	msg := strings.TrimPrefix(e.Message, e.Field+" ")
	if msg == "" {
		msg = "server answered " + strconv.Itoa(status) + " " + http.StatusText(status)
	}
	return &sluice.Error{Op: op, Kind: KindOfStatus(status), Field: e.Field, Message: msg}
}

// WriteJSON answers v as JSON with status, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	setJSONHeaders(w.Header())
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// FailedClosed is the error of a request denied because the store failed
// and its policies fail closed: unavailable, never a limit.
func FailedClosed(policy string) error {
	return &sluice.Error{Kind: sluice.KindUnavailable, Message: "the limiter's store could not decide in time and policy " + strconv.Quote(policy) + " fails closed"}
}
