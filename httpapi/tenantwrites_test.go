package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// racingTenants is a tenant store whose reads wait (up to 50ms) for a
// second read to come before they answer: two writers of one tenant read
// the same version, as two nodes' writers of a remote store may.
type racingTenants struct {
	sluice.TenantStore
	mu      sync.Mutex
	waiting chan struct{} // closed when a second read comes
	changed atomic.Int64  // writes refused for a version no longer stored
}

func (s *racingTenants) UpdateTenant(ctx context.Context, t sluice.Tenant) error {
	err := s.TenantStore.UpdateTenant(ctx, t)
	if errors.Is(err, sluice.ErrTenantChanged) {
		s.changed.Add(1)
	}
	return err
}

func (s *racingTenants) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	t, err := s.TenantStore.GetTenant(ctx, id) // before the other reader's write
	s.mu.Lock()
	if ch := s.waiting; ch != nil {
		close(ch)
		s.waiting = nil
		s.mu.Unlock()
		return t, err
	}
	ch := make(chan struct{})
	s.waiting = ch
	s.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(50 * time.Millisecond):
		s.mu.Lock()
		if s.waiting == ch {
			s.waiting = nil
		}
		s.mu.Unlock()
	}
	return t, err
}

// TestTenantWritesFromTwoHandlers: two API handlers over one tenant store
// (two nodes of one table) block different keys of one tenant at once,
// reading the same version of it, ten times: every block stays. (With a
// lock of each handler's own, one block of each round was lost.) A PUT naming the version it read is
// refused (409, changing nothing) once the tenant has changed since, and
// a PUT naming none replaces the tenant and keeps its blocks.
func TestTenantWritesFromTwoHandlers(t *testing.T) {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tenants := &racingTenants{TenantStore: &memstore.Tenants{}}
	var srvs [2]*httptest.Server
	for i := range srvs {
		s := memstore.New(memstore.Options{})
		h := New(Options{Limiter: engine.New(s, engine.Options{}),
			Tenancy: newTenancy(tenancy.Options{Store: tenants, Secrets: &memstore.Tenants{}, Config: func() *config.Config { return cfg }, AdminKey: adminKey})})
		srvs[i] = httptest.NewServer(h)
		t.Cleanup(func() { srvs[i].Close(); s.Close() })
	}
	node := func(i int) *service { return &service{srv: srvs[i]} }
	if code, out := node(0).do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	const rounds = 10
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range srvs {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", srvs[i].URL+"/v1/tenants/acme/blocks",
					strings.NewReader(fmt.Sprintf(`{"policy":"chat","key":"r%d-n%d","seconds":600}`, round, i)))
				req.Header.Set("Authorization", "Bearer "+adminKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 201 {
					t.Errorf("round %d, node %d: %d", round, i, resp.StatusCode)
				}
			})
		}
		wg.Wait()
	}
	if n := tenants.changed.Load(); n < rounds/2 {
		t.Fatalf("%d writes of %d rounds met another writer: the test raced nobody", n, rounds)
	}
	code, out := node(1).do(t, adminKey, "GET", "/v1/tenants/acme/blocks", "")
	if bs, _ := out["blocks"].([]any); code != 200 || len(bs) != 2*rounds {
		t.Fatalf("after %d rounds of two blocks at once: %d blocks (%d), want %d", rounds, len(bs), code, 2*rounds)
	}

	code, out = node(0).do(t, adminKey, "GET", "/v1/tenants/acme", "")
	read, _ := out["version"].(float64)
	if code != 200 || read != 1+2*rounds {
		t.Fatalf("acme: %d %v, want version %d", code, out, 1+2*rounds)
	}
	if code, out := node(1).do(t, adminKey, "PUT", "/v1/tenants/acme", fmt.Sprintf(`{"tier":"premium","version":%v}`, read)); code != 200 || out["version"] != read+1 {
		t.Fatalf("a PUT over the version read: %d %v, want 200 at version %v", code, out, read+1)
	}
	if code, out := node(0).do(t, adminKey, "PUT", "/v1/tenants/acme", fmt.Sprintf(`{"tier":"free","version":%v}`, read)); code != 409 || !strings.Contains(fmt.Sprint(out["message"]), "changed") {
		t.Fatalf("a PUT over a version no longer stored: %d %v, want 409", code, out)
	}
	if _, out := node(0).do(t, adminKey, "GET", "/v1/tenants/acme", ""); out["tier"] != "premium" {
		t.Fatalf("after a refused PUT: %v, want tier premium", out)
	}
	if code, out := node(0).do(t, adminKey, "PUT", "/v1/tenants/acme", `{"tier":"free"}`); code != 200 || out["tier"] != "free" {
		t.Fatalf("a PUT naming no version: %d %v", code, out)
	}
	if _, out := node(0).do(t, adminKey, "GET", "/v1/tenants/acme/blocks", ""); len(out["blocks"].([]any)) != 2*rounds {
		t.Fatalf("a PUT lost the blocks: %v", out)
	}
	if code, out := node(0).do(t, adminKey, "PUT", "/v1/tenants/acme", `{"version":-1}`); code != 400 || !strings.Contains(fmt.Sprint(out["message"]), "version") {
		t.Fatalf("a PUT with version -1: %d %v, want 400 naming version", code, out)
	}
}
