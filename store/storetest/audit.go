package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// RunAudit runs the conformance tests of a sluice.AuditLog: entries come
// back newest first, per tenant, as written, also when written in the same
// nanosecond, and n bounds the answer.
func RunAudit(t *testing.T, log sluice.AuditLog) {
	ctx := context.Background()
	at := t0
	var want []sluice.AuditEntry
	for i, action := range []string{"tenant.create", "tenant.update", "block", "lift"} {
		e := sluice.AuditEntry{At: at.Add(time.Duration(i/2) * time.Second), Actor: "admin (alice)", Action: action, Tenant: "acme",
			Before: json.RawMessage(`{"limit":` + string(rune('0'+i)) + `}`), After: json.RawMessage(`{"limit":` + string(rune('1'+i)) + `}`)}
		if i == 0 {
			e.Before = nil
		}
		if err := log.AppendAudit(ctx, e); err != nil {
			t.Fatalf("AppendAudit: %v", err)
		}
		want = append([]sluice.AuditEntry{e}, want...)
	}
	if err := log.AppendAudit(ctx, sluice.AuditEntry{At: at, Actor: "admin", Action: "tenant.create", Tenant: "acme2"}); err != nil {
		t.Fatal(err)
	}
	got, err := log.ListAudit(ctx, "acme", 10)
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("ListAudit(acme) = %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) || g.Actor != w.Actor || g.Action != w.Action || g.Tenant != w.Tenant ||
			!bytes.Equal(g.Before, w.Before) || !bytes.Equal(g.After, w.After) {
			t.Fatalf("entry %d = %+v, want %+v", i, g, w)
		}
	}
	if got, _ := log.ListAudit(ctx, "acme", 2); len(got) != 2 || got[0].Action != "lift" || got[1].Action != "block" {
		t.Fatalf("ListAudit(acme, 2) = %+v, want the two newest", got)
	}
	if got, _ := log.ListAudit(ctx, "acme2", 10); len(got) != 1 || got[0].Tenant != "acme2" {
		t.Fatalf("ListAudit(acme2) = %+v, want its one entry", got)
	}
	if got, err := log.ListAudit(ctx, "nobody", 10); err != nil || len(got) != 0 {
		t.Fatalf("ListAudit(nobody) = %+v, %v; want none", got, err)
	}
}
