package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// TestLeases: a configured concurrency policy (reports-running: 5 units,
// 5-minute TTL) and an inline one; all units held is a denial without a
// token; a renewal moves the expiry; a release frees the units for the
// next acquisition, and cannot be made twice.
func TestLeases(t *testing.T) {
	s := newSite(t)
	c := client.New(s.url, client.Options{APIKey: adminKey})
	ctx := context.Background()
	reports := client.LeaseRequest{Tenant: "acme", Policy: "reports-running", Units: 5}
	held, err := c.AcquireLease(ctx, reports)
	if err != nil || !held.Allowed || held.Token == "" || held.Decision.Lease.ID == 0 || !held.Decision.Lease.ExpiresAt.Equal(s.clock.now().Add(5*time.Minute)) {
		t.Fatalf("acquire 5 of 5: %+v %v", held, err)
	}
	one := reports
	one.Units = 0 // one unit
	denied, err := c.AcquireLease(ctx, one)
	if err != nil || denied.Allowed || denied.Token != "" || denied.Decision.Remaining != 0 {
		t.Fatalf("acquire a sixth: %+v %v, want denied", denied, err)
	}

	s.clock.add(time.Minute)
	d, err := c.RenewLease(ctx, reports, held.Token)
	if err != nil || !d.Lease.ExpiresAt.Equal(s.clock.now().Add(5*time.Minute)) {
		t.Fatalf("renew: %+v %v", d, err)
	}
	d, err = c.ReleaseLease(ctx, reports, held.Token)
	if err != nil || d.Remaining != 5 {
		t.Fatalf("release: %+v %v", d, err)
	}
	if again, err := c.AcquireLease(ctx, one); err != nil || !again.Allowed || again.Token == "" {
		t.Fatalf("acquire after the release: %+v %v", again, err)
	}
	for name, f := range map[string]func(context.Context, client.LeaseRequest, string) (sluice.Decision, error){"renew": c.RenewLease, "release": c.ReleaseLease} {
		if _, err := f(ctx, reports, held.Token); !errors.Is(err, sluice.ErrLeaseNotFound) || sluice.KindOf(err) != sluice.KindNotFound {
			t.Errorf("%s of a released lease: %v, want ErrLeaseNotFound", name, err)
		}
		if _, err := f(ctx, reports, ""); sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "token" {
			t.Errorf("%s without a token: %v", name, err)
		}
	}

	inline := client.LeaseRequest{Tenant: "acme", KeyValue: "k",
		Inline: &sluice.Policy{Name: "jobs", Algorithm: sluice.Concurrency, Limit: 1, LeaseTTL: time.Hour}}
	first, err := c.AcquireLease(ctx, inline)
	if err != nil || !first.Allowed || first.Token == "" {
		t.Fatalf("inline: %+v %v", first, err)
	}
	if second, err := c.AcquireLease(ctx, inline); err != nil || second.Allowed {
		t.Fatalf("second inline of 1: %+v %v", second, err)
	}
	// Another key of the same policy is another counter.
	other := inline
	other.KeyValue = "k2"
	if res, err := c.AcquireLease(ctx, other); err != nil || !res.Allowed {
		t.Fatalf("inline, another key: %+v %v", res, err)
	}
	if _, err := c.ReleaseLease(ctx, inline, first.Token); err != nil {
		t.Fatal(err)
	}
	if third, err := c.AcquireLease(ctx, inline); err != nil || !third.Allowed {
		t.Fatalf("inline after the release: %+v %v", third, err)
	}
	// A token is good only for its own policy.
	if _, err := c.ReleaseLease(ctx, reports, first.Token); sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "token" {
		t.Fatalf("another policy's token: %v", err)
	}
}

// TestLeaseErrors: a lease of a policy that is no concurrency policy or
// none at all, of too many units, of both a name and an inline policy, of
// an invalid inline policy or key, each an error naming its field.
func TestLeaseErrors(t *testing.T) {
	s := newSite(t)
	c := client.New(s.url, client.Options{APIKey: adminKey})
	for _, tc := range []struct {
		req   client.LeaseRequest
		field string
	}{
		{client.LeaseRequest{Tenant: "acme", Policy: "chat", Key: map[string]string{"user": "u"}}, "policy"},
		{client.LeaseRequest{Tenant: "acme", Policy: "nope"}, "policy"},
		{client.LeaseRequest{Tenant: "acme", Policy: "reports-running", Units: 6}, "units"},
		{client.LeaseRequest{Tenant: "acme", Policy: "reports-running", Inline: &sluice.Policy{Name: "x", Algorithm: sluice.Concurrency, Limit: 1}}, "policy"},
		{client.LeaseRequest{Tenant: "acme", Inline: &sluice.Policy{Name: "x", Algorithm: sluice.Concurrency, Limit: 0}}, "policy.limit"},
		{client.LeaseRequest{Tenant: "acme", Inline: &sluice.Policy{Name: "x", Algorithm: sluice.Concurrency, Limit: 1}, KeyValue: "\xff"}, "keyValue"},
	} {
		_, err := c.AcquireLease(context.Background(), tc.req)
		if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != tc.field {
			t.Errorf("%+v: %v, want invalid %s", tc.req, err, tc.field)
		}
	}
}
