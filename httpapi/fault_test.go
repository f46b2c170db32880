package httpapi

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// stall makes a store that, while stalled, answers nothing until the
// caller's deadline: a store that has become slow, or is gone.
type stall struct{ on atomic.Bool }

func (s *stall) wait(ctx context.Context) error {
	if !s.on.Load() {
		return nil
	}
	<-ctx.Done()
	return &sluice.Error{Kind: sluice.KindUnavailable, Message: "store stalled", Err: ctx.Err()}
}

type stallingCounters struct {
	*memstore.Store
	*stall
}

func (s stallingCounters) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Apply(ctx, now, ops, dst)
}

type stallingTenants struct {
	*memstore.Tenants
	*stall
}

func (s stallingTenants) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	if err := s.wait(ctx); err != nil {
		return sluice.Tenant{}, err
	}
	return s.Tenants.GetTenant(ctx, id)
}

func (s stallingTenants) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	if err := s.wait(ctx); err != nil {
		return sluice.APIKey{}, err
	}
	return s.Tenants.GetAPIKey(ctx, tenant, id)
}

// TestSlowStoreLeavesItToFailModes: when the store stalls, every read on a
// decision's path is bounded, and the policies' fail modes decide: a
// fail-open policy admits (marked), inline or named, through a tenant's key
// that was read before; a fail-closed one answers 503; a key never read
// cannot be checked, and answers 503 too. Nothing hangs.
func TestSlowStoreLeavesItToFailModes(t *testing.T) {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := &stall{}
	counters := stallingCounters{memstore.New(memstore.Options{}), st}
	defer counters.Close()
	tenants := stallingTenants{&memstore.Tenants{}, st}
	const deadline = 50 * time.Millisecond
	h := New(Options{Limiter: engine.New(counters, engine.Options{Timeout: deadline}),
		Tenancy: newTenancy(tenancy.Options{Store: tenants, Config: func() *config.Config { return cfg }, AdminKey: adminKey, StoreTimeout: deadline}),
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	sv := &service{srv: srv}
	if code, out := sv.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	code, out := sv.do(t, adminKey, "POST", "/v1/tenants/acme/keys", `{}`)
	if code != 201 {
		t.Fatal(code, out)
	}
	key := out["token"].(string)
	inline := func(mode string) string {
		return `{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":5,"window":"1m","failMode":"` + mode + `"}}]}`
	}
	if code, out := sv.do(t, key, "POST", "/v1/check", inline("open")); code != 200 || out["failedOpen"] == true {
		t.Fatalf("before the stall: %d %v", code, out)
	}
	st.on.Store(true)
	for _, tc := range []struct {
		name, key, body string
		status          int
	}{
		{"inline, fail open", key, inline("open"), 200},
		{"named, fail open", key, `{"endpoint":"models","key":{"user":"u"}}`, 200},
		{"inline, fail closed", key, inline("closed"), 503},
		{"a key never read", "sk_acme.nosuchid.secret", inline("open"), 503},
	} {
		code, out := sv.do(t, tc.key, "POST", "/v1/check", tc.body)
		if code != tc.status || (code == 200 && out["failedOpen"] != true) {
			t.Errorf("%s: %d %v, want %d", tc.name, code, out, tc.status)
		}
	}
}
