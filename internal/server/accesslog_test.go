package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// records returns the JSON log records written so far.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(s.b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRequestLog: refusals and client errors are logged at info, server
// errors at error, successes not at info; each with an id that the response
// carries, the method, the route (never a query, nor a token in the path),
// the status, the duration and the tenant its route names.
func TestRequestLog(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	})
	mux.HandleFunc("GET /v1/tenants/{id}/sessions/{session}", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("{}"))
	})
	mux.HandleFunc("DELETE /v1/leases/{token}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "store down", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /v1/ws", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})
	var sink syncBuffer
	log := slog.New(slog.NewJSONHandler(&sink, nil)) // info and above
	srv := httptest.NewServer(requestLog(log, mux))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	do := func(method, path, id string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	type want struct {
		level, method, path, tenant string
		status                      float64
	}
	for _, tc := range []struct {
		method, path, id string
		want             *want // nil: nothing at info
		keepID           bool
	}{
		{"POST", "/v1/check", "", &want{"INFO", "POST", "/v1/check", "", 429}, false},
		{"GET", "/v1/tenants/acme/sessions/s3cr3t-session", "", nil, false},
		{"DELETE", "/v1/leases/s3cr3t-token", "", &want{"ERROR", "DELETE", "/v1/leases/{token}", "", 503}, false},
		{"GET", "/v1/ws?tenant=acme&session=s3cr3t-session", "caller-id_1.2", &want{"INFO", "GET", "/v1/ws", "acme", 403}, true},
		{"GET", "/nowhere?session=s3cr3t-session", strings.Repeat("x", 65), &want{"INFO", "GET", "/*", "", 404}, false},
		// A known path with the wrong method matches no route: its
		// token is not logged.
		{"PATCH", "/v1/leases/s3cr3t-token/renew", "", &want{"INFO", "PATCH", "/v1/leases/*/renew", "", 404}, false},
		// The second refusal of the route this minute: debug only.
		{"POST", "/v1/check", "bad id\"", nil, false},
	} {
		before := len(sink.records(t))
		resp := do(tc.method, tc.path, tc.id)
		id := resp.Header.Get("X-Request-Id")
		if !saneRequestID(id) || (id == tc.id) != tc.keepID {
			t.Errorf("%s %s with X-Request-Id %q: answered X-Request-Id %q", tc.method, tc.path, tc.id, id)
		}
		recs := sink.records(t)[before:]
		if tc.want == nil {
			if len(recs) != 0 {
				t.Errorf("%s %s: logged at info: %v", tc.method, tc.path, recs)
			}
			continue
		}
		if len(recs) != 1 {
			t.Fatalf("%s %s: %d log records, want 1: %v", tc.method, tc.path, len(recs), recs)
		}
		r := recs[0]
		w := tc.want
		tenant, _ := r["tenant"].(string)
		if r["level"] != w.level || r["msg"] != "request" || r["method"] != w.method || r["path"] != w.path ||
			r["status"] != w.status || tenant != w.tenant || r["request_id"] != id || r["duration"] == nil {
			t.Errorf("%s %s: logged %v, want %+v with request_id %q", tc.method, tc.path, r, *w, id)
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if strings.Contains(sink.b.String(), "s3cr3t") {
		t.Fatalf("a token or session id from a path or query reached the log:\n%s", sink.b.String())
	}
}

// TestRequestLogSampled: of a flood of refusals (and of server errors),
// one line a minute per tenant, route and status reaches info, naming the
// policy that refused; every one is a debug line; the remembered keys are
// bounded, and forgotten each minute.
func TestRequestLogSampled(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{id}/policies", func(w http.ResponseWriter, r *http.Request) {
		// As httpapi does once the caller may reach the tenant.
		w.(interface{ NoteTenant(string) }).NoteTenant(r.PathValue("id"))
		w.Header().Set("Ratelimit", `"hourly";r=7;t=30, "burst";r=0;t=1`)
		w.WriteHeader(http.StatusTooManyRequests)
	})
	// A route whose caller is refused before any tenant is noted: the
	// path's tenant is the caller's choice.
	mux.HandleFunc("GET /v1/tenants/{id}/keys", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	var info, debug syncBuffer
	srvInfo := httptest.NewServer(requestLog(slog.New(slog.NewJSONHandler(&info, nil)), mux))
	defer srvInfo.Close()
	srvDebug := httptest.NewServer(requestLog(slog.New(slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})), mux))
	defer srvDebug.Close()
	for _, srv := range []*httptest.Server{srvInfo, srvDebug} {
		for i := range 300 {
			tenant := "acme"
			if i%100 == 99 {
				tenant = "beta"
			}
			resp, err := srv.Client().Get(srv.URL + "/v1/tenants/" + tenant + "/policies")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		srv.Client().CloseIdleConnections()
	}
	recs := info.records(t)
	if len(recs) != 2 || recs[0]["tenant"] != "acme" || recs[1]["tenant"] != "beta" || recs[0]["policy"] != "burst" || recs[0]["sampled"] == nil {
		t.Fatalf("300 refusals of two tenants logged at info as %v; want one line for each tenant, naming the policy that refused", recs)
	}
	if n := len(debug.records(t)); n != 300 {
		t.Fatalf("%d debug lines for 300 requests, want one each", n)
	}
	// Unauthenticated, naming a new tenant each time: one line, not one
	// a tenant, whatever tenants the paths name.
	info.reset()
	for i := range 200 {
		resp, err := srvInfo.Client().Get(srvInfo.URL + "/v1/tenants/t" + strconv.Itoa(i) + "/keys")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if recs := info.records(t); len(recs) != 1 || recs[0]["tenant"] != "t0" {
		t.Fatalf("200 unauthenticated requests naming 200 tenants logged at info as %v; want one line, of the route and status", recs)
	}
	var s logSample
	now := time.Now()
	fulls := 0
	for i := range maxLogSample + 10 {
		if _, full := s.first("t"+strconv.Itoa(i), "/v1/check", 429, now); full {
			fulls++
		}
	}
	if first, _ := s.first("new", "/v1/check", 429, now); len(s.seen) != maxLogSample || first || fulls != 1 {
		t.Fatalf("the sample holds %d keys, said full %d times; want at most %d, no new key logged past them, and full said once", len(s.seen), fulls, maxLogSample)
	}
	if first, _ := s.first("t0", "/v1/check", 429, now.Add(time.Minute)); !first || len(s.seen) != 1 {
		t.Fatal("a new minute did not start afresh")
	}
}

// TestNewRequestID: new ids are as crypto/rand.Text's, kept if sent back,
// and distinct.
func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 10_000 {
		id := newRequestID()
		if len(id) != 26 || strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" || !saneRequestID(id) || seen[id] {
			t.Fatalf("id %q: want 26 new characters of the base32 alphabet", id)
		}
		seen[id] = true
	}
}
