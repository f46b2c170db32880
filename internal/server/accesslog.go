package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// maxRequestID bounds an incoming X-Request-Id that is kept.
const maxRequestID = 64

// requestLog gives every request an id and logs its outcome. The id is the
// request's own X-Request-Id if that is sane (1 to 64 of A-Z a-z 0-9 . _ -),
// else a new random one; it is returned in the X-Request-Id response header
// and passed on in the request's. Every request is a debug line, with the
// id, method, route, status, duration and, when the route names it, the
// tenant; a refusal (429) also with the policy that refused. A refusal or
// another client error is also an info line, and a server error an error
// line, but only the first of its tenant, route and status each minute
// (logSample): a limiter under attack, or a store down, must not flood its
// own logs with a line per request. The metrics count every one.
//
// The tenant is the one the handler noted (NoteTenant: the tenant a
// request was authenticated as, or decided for), else the one its path
// names. Only a noted tenant keys the sample: a path's is whatever the
// caller wrote, and an unauthenticated caller naming a new tenant in each
// request would otherwise fill the sample and push the minute's real
// errors down to debug.
//
// The logged path is the route's pattern (/v1/leases/{token}), not the
// request's path, and never the query: paths and queries carry lease
// tokens and session ids, which are credentials. Only a path that matched
// no route is logged as sent, cut to 256 bytes.
func requestLog(log *slog.Logger, next http.Handler) http.Handler {
	sample := &logSample{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			id = newRequestID()
		}
		// Set, as Header.Set would, in one allocation for both.
		ids := []string{id, id}
		r.Header["X-Request-Id"] = ids[:1:1]
		w.Header()["X-Request-Id"] = ids[1:2:2]
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := sw.status
			v := recover()
			switch {
			case v != nil:
				status = http.StatusInternalServerError
				defer panic(v) // net/http's to handle, after the log
			case status == 0:
				status = http.StatusOK // nothing written: net/http answers 200
			}
			level := slog.LevelDebug
			switch {
			case status >= 500:
				level = slog.LevelError
			case status >= 400:
				level = slog.LevelInfo
			}
			path, tenant := routePath(r), sw.tenant
			if level > slog.LevelDebug {
				first, full := sample.first(tenant, path, status, time.Now())
				if full {
					log.Warn("request log: more tenants, routes and statuses failed this minute than it samples; the rest of the minute's failures are at debug only", "sampled", maxLogSample)
				}
				if !first {
					level = slog.LevelDebug // its tenant, route and status were logged this minute
				}
			}
			if !log.Enabled(context.Background(), level) {
				return
			}
			attrs := []slog.Attr{
				slog.String("request_id", id),
				slog.String("method", cut(r.Method, 16)),
				slog.String("path", path),
				slog.Int("status", status),
				slog.Duration("duration", time.Since(start)),
			}
			if tenant == "" {
				tenant = routeTenant(r)
			}
			if tenant != "" {
				attrs = append(attrs, slog.String("tenant", tenant))
			}
			if status == http.StatusTooManyRequests {
				if p := refusingPolicy(sw.Header()); p != "" {
					attrs = append(attrs, slog.String("policy", p))
				}
			}
			if level > slog.LevelDebug && status >= 400 {
				attrs = append(attrs, slog.String("sampled", "first of its tenant, route and status this minute; the rest at debug"))
			}
			log.LogAttrs(context.Background(), level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

// logSample remembers which tenants, routes and statuses were logged above
// debug in the current minute, at most maxLogSample of them: past that,
// the rest of the minute's errors are logged at debug only, and the
// request that found it full says so once (full). A request whose key was
// logged already this minute, the flood's case, takes only a read lock.
// The zero logSample is ready; safe for concurrent use.
type logSample struct {
	mu     sync.RWMutex
	minute int64
	seen   map[logKey]struct{}
	filled bool // the minute's sample is full, and was said so
}

type logKey struct {
	tenant, path string
	status       int
}

const maxLogSample = 1024

// first reports whether a request of tenant, path and status is the first
// of the minute of now, and remembers it; full reports that it was not
// because the sample just filled (once a minute).
func (s *logSample) first(tenant, path string, status int, now time.Time) (first, full bool) {
	m := now.Unix() / 60
	k := logKey{tenant, path, status}
	s.mu.RLock()
	_, seen := s.seen[k]
	stale := m != s.minute
	s.mu.RUnlock()
	if seen && !stale {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m != s.minute || s.seen == nil {
		s.minute, s.seen, s.filled = m, map[logKey]struct{}{}, false
	}
	if _, ok := s.seen[k]; ok {
		return false, false
	}
	if len(s.seen) >= maxLogSample {
		full, s.filled = !s.filled, true
		return false, full
	}
	s.seen[k] = struct{}{}
	return true, false
}

// refusingPolicy is the policy a refusal names: the first of its RateLimit
// header's items with nothing remaining (r=0), or its first.
func refusingPolicy(h http.Header) string {
	items := strings.Split(h.Get("Ratelimit"), ",")
	name := func(item string) string {
		item = strings.TrimSpace(item)
		if len(item) < 2 || item[0] != '"' {
			return ""
		}
		n, _, _ := strings.Cut(item[1:], `"`)
		return cut(n, 64)
	}
	for _, item := range items {
		if strings.Contains(item, ";r=0;") || strings.HasSuffix(item, ";r=0") {
			return name(item)
		}
	}
	return name(items[0])
}

// newRequestID returns a new request id: 26 characters of the base32
// alphabet, as crypto/rand.Text, of 128 random bits drawn from the
// runtime's generator (ChaCha8, seeded by the system), which costs no
// system call and no lock: an id tells requests apart, it guards nothing.
func newRequestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var b [26]byte
	x, y := rand.Uint64(), rand.Uint64()
	for i := range 13 {
		b[i], b[13+i] = alphabet[x&31], alphabet[y&31]
		x >>= 5
		y >>= 5
	}
	return string(b[:])
}

// saneRequestID reports whether an incoming request id may be kept.
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// routePath is the path of the route r matched, which http.ServeMux set in
// r.Pattern while serving it (as "METHOD PATH"); for a path that matched
// nothing (an unknown route, or a known one with the wrong method), the
// path as sent with every segment but the API's own words replaced by
// "*": paths carry lease tokens and session ids, which a log must not.
func routePath(r *http.Request) string {
	if r.Pattern == "" {
		return redact(r.URL.Path)
	}
	if _, path, ok := strings.Cut(r.Pattern, " "); ok {
		return path
	}
	return r.Pattern
}

// routeTenant is the tenant the request names, if that costs nothing to
// find: the {id} of a /v1/tenants/{id} route, or the tenant parameter of a
// WebSocket connect. It is the tenant named, not one authenticated.
func routeTenant(r *http.Request) string {
	var t string
	switch path := routePath(r); {
	case strings.HasPrefix(path, "/v1/tenants/{id}"):
		t = r.PathValue("id")
	case path == "/v1/ws" || path == "/v1/ws/admit":
		t = r.URL.Query().Get("tenant")
	}
	if !sluice.ValidID(t) {
		return ""
	}
	return t
}

// routeWords are the path segments of Sluice's routes that name no
// secret; any other segment of an unmatched path is logged as "*".
var routeWords = map[string]bool{
	"v1": true, "check": true, "leases": true, "renew": true, "tenants": true, "keys": true,
	"sessions": true, "connections": true, "policies": true, "ws": true, "admit": true,
	"healthz": true, "readyz": true, "metrics": true, "debug": true,
}

func redact(path string) string {
	segs := strings.Split(cut(path, 256), "/")
	for i, s := range segs {
		if s != "" && !routeWords[s] {
			segs[i] = "*"
		}
	}
	return strings.Join(segs, "/")
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// statusWriter records the status of a response. Unwrap lets
// http.ResponseController and the WebSocket upgrade reach the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
	tenant string // noted by the handler (NoteTenant)
}

// NoteTenant records the tenant the request was authenticated as or
// decided for, for its log line; httpapi finds it through Unwrap.
func (w *statusWriter) NoteTenant(tenant string) { w.tenant = tenant }

func (w *statusWriter) WriteHeader(code int) {
	// Informational answers (100, 103) come before the final one; 101
	// is final, for an upgrade.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
