package client_test

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

func server(t *testing.T, s *memstore.Store) string {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Limiter: engine.New(s, engine.Options{}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}})}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// unreachable returns the URL of a server that is not there.
func unreachable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// TestPenaltyTravels: a policy's penalty reaches the server: the third
// request is denied by the penalty box, for the box's hour, not by the
// minute's counter.
func TestPenaltyTravels(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	c := client.New(server(t, s), client.Options{})
	p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute,
		Penalty: sluice.Penalty{After: 1, Base: time.Hour, Max: 2 * time.Hour}}
	req := sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "1.2.3.4"}}}
	var last sluice.Result
	for i := range 3 {
		res, err := c.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (i == 0) || res.Decision.Allowed != res.Allowed {
			t.Fatalf("request %d: allowed %v, reported decision allowed %v", i, res.Allowed, res.Decision.Allowed)
		}
		last = res
	}
	if last.Decision.RetryAfter < 30*time.Minute {
		t.Fatalf("third request retries after %v: the penalty box (1h) was not applied", last.Decision.RetryAfter)
	}
}

// TestFailModesOverTheNetwork: with the server unreachable, or unable to
// decide, each policy's fail mode decides, as the engine's does with its
// store gone: no error, admitted and marked for fail-open, denied and
// marked (a fault, not a limit) for fail-closed.
func TestFailModesOverTheNetwork(t *testing.T) {
	unreachable := unreachable(t)
	closed := memstore.New(memstore.Options{})
	closed.Close()
	for name, base := range map[string]string{"unreachable": unreachable, "store down": server(t, closed)} {
		t.Run(name, func(t *testing.T) {
			c := client.New(base, client.Options{})
			for _, mode := range []sluice.FailMode{sluice.FailOpen, sluice.FailClosed} {
				p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute, FailMode: mode}
				res, err := c.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p}}})
				if err != nil {
					t.Fatalf("fail %v: %v, want a result", mode, err)
				}
				d := res.Decision
				switch mode {
				case sluice.FailOpen:
					if !res.Allowed || !d.FailedOpen || d.FailedClosed {
						t.Fatalf("fail open: %+v", res)
					}
				case sluice.FailClosed:
					if res.Allowed || !d.FailedClosed || d.RetryAfter != sluice.FailedRetry {
						t.Fatalf("fail closed: %+v", res)
					}
				}
			}
		})
	}
}

// TestBadInputRefusedBeforeSending: keys JSON cannot carry are refused,
// naming the field; the server's own refusals keep their field.
func TestBadInputRefusedBeforeSending(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	c := client.New(server(t, s), client.Options{})
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	_, err := c.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "\xff"}}})
	if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "checks[0].key" {
		t.Fatalf("invalid UTF-8 key: %v", err)
	}
	p.Limit = 0
	_, err = c.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p}}})
	if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "checks[0].policy.limit" {
		t.Fatalf("zero limit: %v", err)
	}
}
