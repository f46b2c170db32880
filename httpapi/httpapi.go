// Package httpapi serves Sluice's HTTP JSON API:
//
//	POST /v1/check   decide a request against inline policies
//	GET  /healthz    liveness
//
// Every response body is JSON. A decision answers 200 when allowed and 429
// when denied, with Retry-After and the X-RateLimit-* headers; bad input
// answers 400 with an error naming the field, and counts nothing.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Handler serves the API. Create it with New.
type Handler struct {
	limiter sluice.Limiter
	log     *slog.Logger
	mux     *http.ServeMux
	allow   map[string][]string // path -> methods, for 405's Allow header
}

// New returns a Handler deciding with l. A nil logger discards logs.
func New(l sluice.Limiter, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{limiter: l, log: log, mux: http.NewServeMux(), allow: map[string][]string{}}
	h.route("POST", "/v1/check", h.check)
	h.route("GET", "/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return h
}

func (h *Handler) route(method, path string, fn http.HandlerFunc) {
	h.mux.HandleFunc(method+" "+path, fn)
	h.allow[path] = append(h.allow[path], method)
}

// ServeHTTP routes r, answering unknown routes 404 and known paths with the
// wrong method 405, in JSON like every other error.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		methods, ok := h.allow[r.URL.Path]
		if !ok {
			writeError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
			return
		}
		w.Header().Set("Allow", strings.Join(methods, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed", Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)})
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeCheck(body)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := h.limiter.Check(r.Context(), req)
	if err != nil {
		if sluice.KindOf(err) != sluice.KindInvalid {
			h.log.Error("check failed", "tenant", req.Tenant, "err", err)
		}
		writeError(w, err)
		return
	}
	writeDecisionHeaders(w.Header(), res.Decision)
	out := checkResponse{Allowed: res.Allowed, Decisions: make([]decisionJSON, len(res.Decisions))}
	out.decisionJSON = toJSON(res.Decision)
	for i, d := range res.Decisions {
		out.Decisions[i] = toJSON(d)
	}
	status := http.StatusOK
	if !res.Allowed {
		status = http.StatusTooManyRequests
		secs := retryAfterSeconds(res.Decision.RetryAfter)
		out.Error = "Rate limit exceeded"
		out.Message = fmt.Sprintf("Too many requests. Please try again in %d seconds.", secs)
		for _, d := range res.Decisions {
			if !d.Allowed {
				out.Violated = append(out.Violated, d.Policy)
			}
		}
	}
	writeJSON(w, status, out)
}

// checkResponse is the body of a decision: the reported decision's fields
// at the top (seed 003's limit, resetAt), then one entry per check.
type checkResponse struct {
	Allowed bool `json:"allowed"`
	decisionJSON
	Error     string         `json:"error,omitempty"`
	Message   string         `json:"message,omitempty"`
	Violated  []string       `json:"violated-policies,omitempty"`
	Decisions []decisionJSON `json:"decisions"`
}

type decisionJSON struct {
	Policy    string `json:"policy"`
	Allowed   bool   `json:"allowed"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// ResetAt is in epoch seconds, rounded up: never before the real reset.
	ResetAt int64 `json:"resetAt"`
	// RetryAfter is in whole seconds, rounded up, as the header.
	RetryAfter   int64      `json:"retryAfter"`
	RetryAfterMs int64      `json:"retryAfterMs"`
	Lease        *leaseJSON `json:"lease,omitempty"`
}

type leaseJSON struct {
	// ID is a decimal string: JSON numbers lose precision past 2^53.
	ID          string `json:"id"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
}

func toJSON(d sluice.Decision) decisionJSON {
	j := decisionJSON{
		Policy:       d.Policy,
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetAt:      ceilUnix(d.ResetAt),
		RetryAfter:   retryAfterSeconds(d.RetryAfter),
		RetryAfterMs: int64(math.Ceil(float64(d.RetryAfter) / float64(time.Millisecond))),
	}
	if d.Lease.ID != 0 {
		j.Lease = &leaseJSON{ID: strconv.FormatUint(d.Lease.ID, 10), ExpiresAtMs: d.Lease.ExpiresAt.UnixMilli()}
	}
	return j
}

// writeDecisionHeaders writes the headers of the reported decision:
// X-RateLimit-Limit, -Remaining and -Reset (epoch seconds, as GitHub), and
// on a denial Retry-After.
func writeDecisionHeaders(h http.Header, d sluice.Decision) {
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilUnix(d.ResetAt), 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10))
	}
}

// retryAfterSeconds rounds up to whole seconds, so that a client that waits
// that long is never early; a denial always waits at least a second.
func retryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilUnix returns t in epoch seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

type errorBody struct {
	Error   string `json:"error"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// statusOf maps error kinds to HTTP statuses, in one place.
var statusOf = map[sluice.Kind]int{
	sluice.KindInvalid:     http.StatusBadRequest,
	sluice.KindNotFound:    http.StatusNotFound,
	sluice.KindUnavailable: http.StatusServiceUnavailable,
	sluice.KindInternal:    http.StatusInternalServerError,
}

var codeOf = map[sluice.Kind]string{
	sluice.KindInvalid:     "invalid_request",
	sluice.KindNotFound:    "not_found",
	sluice.KindUnavailable: "unavailable",
	sluice.KindInternal:    "internal",
}

func writeError(w http.ResponseWriter, err error) {
	kind := sluice.KindOf(err)
	body := errorBody{Error: codeOf[kind], Field: sluice.FieldOf(err), Message: message(err)}
	if kind == sluice.KindInternal {
		body.Message = "internal error" // never leak internals
	}
	writeJSON(w, statusOf[kind], body)
}

// message is what a client is told of err: the innermost Sluice error's
// field and message, without the chain of operations.
func message(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if se, ok := e.(*sluice.Error); ok && se.Message != "" {
			return strings.TrimSpace(se.Field + " " + se.Message)
		}
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
