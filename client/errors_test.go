package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/wire"
)

// TestServerErrorKinds: each error the real server answers on the
// decision routes comes back with its kind (and field), so that callers
// tell them apart; a limit reached is a result, not an error.
func TestServerErrorKinds(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	betaKey := s.tenant(t, `{"id":"beta"}`)
	admin := client.New(s.url, client.Options{APIKey: adminKey})
	beta := client.New(s.url, client.Options{APIKey: betaKey})
	chat := func(tenant string) client.Named {
		return client.Named{Tenant: tenant, Endpoint: "chat", Key: map[string]string{"user": "u"}, Hits: 1}
	}

	_, err := admin.CheckNamed(ctx, client.Named{Tenant: "acme", Endpoint: "chat", Hits: 1})
	if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "key.user" {
		t.Errorf("400: %v", err)
	}
	_, err = client.New(s.url, client.Options{APIKey: "sk_beta.nope.nope"}).CheckNamed(ctx, chat("beta"))
	if sluice.KindOf(err) != sluice.KindUnauthorized {
		t.Errorf("401: %v", err)
	}
	_, err = beta.CheckNamed(ctx, chat("acme"))
	if sluice.KindOf(err) != sluice.KindForbidden {
		t.Errorf("403: %v", err)
	}
	reports := client.LeaseRequest{Tenant: "acme", Policy: "reports-running", Units: 5}
	lease, err := admin.AcquireLease(ctx, reports)
	if err != nil || !lease.Allowed {
		t.Fatal(lease, err)
	}
	if res, err := admin.AcquireLease(ctx, reports); err != nil || res.Allowed || res.Token != "" || res.Decision.Policy != "reports-running" {
		t.Errorf("429: %+v %v, want a denial", res, err)
	}
	if _, err := admin.ReleaseLease(ctx, reports, lease.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ReleaseLease(ctx, reports, lease.Token); sluice.KindOf(err) != sluice.KindNotFound {
		t.Errorf("404: %v", err)
	}

	// The store fails: the lease's renewal is unavailable; a decision
	// of a policy that fails closed (reports-running) is denied, marked
	// as failed closed (the server's 503), whatever the client's fail
	// mode; one that fails open (chat) is admitted by the server.
	lease, err = admin.AcquireLease(ctx, reports)
	if err != nil || !lease.Allowed {
		t.Fatal(lease, err)
	}
	s.store.Close()
	if _, err := admin.RenewLease(ctx, reports, lease.Token); sluice.KindOf(err) != sluice.KindUnavailable {
		t.Errorf("503 on renewal: %v", err)
	}
	if res, err := admin.AcquireLease(ctx, reports); err != nil || res.Allowed || !res.Decision.FailedClosed {
		t.Errorf("503 on acquisition: %+v %v, want failed closed", res, err)
	}
	res, err := admin.CheckNamed(ctx, client.Named{Tenant: "acme", Endpoint: "reports", Hits: 1})
	if err != nil || res.Allowed || !res.Decision.FailedClosed || res.Decision.Policy != "reports" {
		t.Errorf("503 on a check: %+v %v, want failed closed", res.Result, err)
	}
	if res, err := admin.CheckNamed(ctx, chat("acme")); err != nil || !res.Allowed || !res.Decision.FailedOpen || res.Decision.Limit != 500 {
		t.Errorf("a fail-open policy with the store down: %+v %v, want the server's failed open", res.Result, err)
	}
}

// TestErrorKindsKept: whatever kind an error answer is of, the client's
// error has it, and the field; an unknown lease is sluice.ErrLeaseNotFound.
func TestErrorKindsKept(t *testing.T) {
	var kind sluice.Kind
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, &sluice.Error{Kind: kind, Field: "f", Message: "m"})
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.Options{})
	req := client.LeaseRequest{Tenant: "acme", Policy: "p"}
	for _, k := range []sluice.Kind{sluice.KindInvalid, sluice.KindUnauthorized, sluice.KindForbidden, sluice.KindNotFound,
		sluice.KindConflict, sluice.KindGone, sluice.KindUnavailable, sluice.KindInternal} {
		kind = k
		_, err := c.RenewLease(context.Background(), req, "tok")
		var se *sluice.Error
		if !errors.As(err, &se) || sluice.KindOf(err) != k {
			t.Errorf("%v (%d): %v", k, wire.Status(k), err)
		}
		if k == sluice.KindNotFound {
			if !errors.Is(err, sluice.ErrLeaseNotFound) {
				t.Errorf("404: %v, want ErrLeaseNotFound", err)
			}
		} else if sluice.FieldOf(err) != "f" {
			t.Errorf("%v: field %q", k, sluice.FieldOf(err))
		}
	}
}

// TestNoDecision: when no server decides (it cannot be reached, a proxy
// answers 502 or 503 of its own), the client's fail mode decides the
// checks and leases of configured policies, an inline lease's policy its
// own; the server's own 503 is failed closed whatever the client's mode.
func TestNoDecision(t *testing.T) {
	proxy := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no healthy upstream", status)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	server503 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, wire.FailedClosed("reports-running"))
	}))
	defer server503.Close()
	ctx := context.Background()
	named := client.Named{Tenant: "acme", Policies: []string{"chat", "models"}, Key: map[string]string{"user": "u"}, Hits: 1}
	configured := client.LeaseRequest{Tenant: "acme", Policy: "reports-running"}
	inline := client.LeaseRequest{Tenant: "acme", Inline: &sluice.Policy{Name: "jobs", Algorithm: sluice.Concurrency, Limit: 3, FailMode: sluice.FailClosed}}
	for name, base := range map[string]string{"unreachable": unreachable(t), "proxy 502": proxy(http.StatusBadGateway), "proxy 503": proxy(http.StatusServiceUnavailable)} {
		for _, mode := range []sluice.FailMode{sluice.FailOpen, sluice.FailClosed} {
			c := client.New(base, client.Options{FailMode: mode})
			open := mode == sluice.FailOpen
			res, err := c.CheckNamed(ctx, named)
			if err != nil || res.Allowed != open || res.Decision.FailedOpen != open || res.Decision.FailedClosed == open ||
				len(res.Decisions) != 2 || res.Decisions[1].Policy != "models" || res.Header != nil {
				t.Errorf("%s, fail %v: check %+v %v", name, mode, res, err)
			}
			lease, err := c.AcquireLease(ctx, configured)
			if err != nil || lease.Allowed != open || lease.Token != "" || lease.Decision.Policy != "reports-running" {
				t.Errorf("%s, fail %v: lease %+v %v", name, mode, lease, err)
			}
			lease, err = c.AcquireLease(ctx, inline)
			if err != nil || lease.Allowed || !lease.Decision.FailedClosed || lease.Decision.Limit != 3 || lease.Decision.RetryAfter != time.Second {
				t.Errorf("%s, fail %v: inline lease %+v %v, want its own mode, closed", name, mode, lease, err)
			}
			if _, err := c.RenewLease(ctx, configured, "tok"); sluice.KindOf(err) != sluice.KindUnavailable {
				t.Errorf("%s: renew %v", name, err)
			}
		}
	}
	c := client.New(server503.URL, client.Options{FailMode: sluice.FailOpen})
	if res, err := c.CheckNamed(ctx, named); err != nil || res.Allowed || !res.Decision.FailedClosed {
		t.Errorf("the server's 503: %+v %v, want failed closed", res, err)
	}
	if res, err := c.AcquireLease(ctx, configured); err != nil || res.Allowed || !res.Decision.FailedClosed {
		t.Errorf("the server's 503 to a lease: %+v %v, want failed closed", res, err)
	}
}
