package httpapi

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// TestTenantUnknownFieldNamedByPath: a member a tenant's body has no field
// for is named by its path from the body, however deep (wire.DecodeStrict;
// the check route's are wire's TestUnknownFieldNamedByPath).
func TestTenantUnknownFieldNamedByPath(t *testing.T) {
	for body, field := range map[string]string{
		`{"id":"t","overrides":{"chat":{"limit":3,"windw":"1s"}}}`:         "overrides.chat.windw",
		`{"id":"t","settings":{"tenantConnections":3,"sesionTTL":"1m"}}`:   "settings.sesionTTL",
		`{"id":"t","overrides":{"chat":{"limit":3}},"tier":"f","tiers":1}`: "tiers",
	} {
		err := wire.DecodeStrict([]byte(body), new(tenancy.TenantDoc), "")
		if got := sluice.FieldOf(err); got != field {
			t.Errorf("tenant %s: %v, want an error naming %s", body, err, field)
		}
	}
}

// TestWrongKindOfBody: a body that is not the object a route wants says
// so, on every route that decodes one (insighthttp's try:
// TestTryWrongKindOfBody).
func TestWrongKindOfBody(t *testing.T) {
	for _, v := range []any{new(wire.LeaseRequest), new(tenancy.TenantDoc), new(keyRequest), new(tenancy.BlockRequest)} {
		err := wire.DecodeStrict([]byte(`[]`), v, "")
		if got, want := fmt.Sprint(err), "body must be a JSON object, got array"; got != want {
			t.Errorf("%T: %q, want %q", v, got, want)
		}
	}
}
