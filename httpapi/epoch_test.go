package httpapi

import "testing"

// TestRecreatedTenantStartsAfresh: a tenant deleted and created again
// under the same id is a new tenant to its counters, as to its sessions and
// tokens: none of the earlier one's counts, penalty boxes or leases hold it
// back (and none of its own reach a later one). A tenant that is not
// deleted keeps its counters across any change of its record.
func TestRecreatedTenantStartsAfresh(t *testing.T) {
	s := newService(t)
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"zeta"}`); code != 201 {
		t.Fatalf("create zeta: %d %v", code, out)
	}
	models := `{"tenant":"zeta","endpoint":"models","key":{"user":"u1"}}`
	login := `{"tenant":"zeta","policies":["login-per-ip"],"key":{"ip":"192.0.2.1"}}`
	for range 10 {
		if code, out := s.do(t, adminKey, "POST", "/v1/check", models); code != 200 {
			t.Fatalf("models: %d %v", code, out)
		}
	}
	// login-per-ip allows 5 a minute and boxes the key after 3 denials.
	for range 9 {
		s.do(t, adminKey, "POST", "/v1/check", login)
	}
	for range 5 {
		if code, out := s.do(t, adminKey, "POST", "/v1/leases", `{"tenant":"zeta","policy":"reports-running"}`); code != 200 {
			t.Fatalf("lease: %d %v", code, out)
		}
	}
	spent := func(what string) {
		t.Helper()
		if code, _ := s.do(t, adminKey, "POST", "/v1/check", models); code != 429 {
			t.Fatalf("%s: models answered %d, want 429 (the window spent)", what, code)
		}
		if code, _ := s.do(t, adminKey, "POST", "/v1/check", login); code != 429 {
			t.Fatalf("%s: login answered %d, want 429 (boxed)", what, code)
		}
		if code, _ := s.do(t, adminKey, "POST", "/v1/leases", `{"tenant":"zeta","policy":"reports-running"}`); code != 429 {
			t.Fatalf("%s: a sixth lease answered %d, want 429", what, code)
		}
	}
	spent("before any change")
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/zeta", `{"id":"zeta","tier":"free"}`); code != 200 {
		t.Fatalf("replace zeta: %d %v", code, out)
	}
	spent("after a replace of its record")

	if code, out := s.do(t, adminKey, "DELETE", "/v1/tenants/zeta", ""); code != 200 && code != 204 {
		t.Fatalf("delete zeta: %d %v", code, out)
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"zeta"}`); code != 201 {
		t.Fatalf("create zeta again: %d %v", code, out)
	}
	for i := range 10 {
		if code, out := s.do(t, adminKey, "POST", "/v1/check", models); code != 200 {
			t.Fatalf("models %d of the new zeta: %d %v, want the whole window", i, code, out)
		}
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/check", login); code != 200 {
		t.Fatalf("login of the new zeta: %d %v, want no box", code, out)
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/leases", `{"tenant":"zeta","policy":"reports-running","units":5}`); code != 200 {
		t.Fatalf("5 lease units of the new zeta: %d %v, want all free", code, out)
	}
	// The admin cannot hand a new tenant an epoch: it is the server's.
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"zeta2","epoch":1}`); code != 400 || out["field"] != "epoch" {
		t.Fatalf("a tenant with an epoch in its body: %d %v, want 400 naming epoch", code, out)
	}
}
