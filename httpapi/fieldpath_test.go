package httpapi

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestUnknownFieldNamedByPath: a member no field takes is named by its
// path from the body, however deep, by the check route's decoders (the
// fast one hands every error to encoding/json's) and by the other routes'
// decodeStrict; encoding/json alone names it without its path
// ("checks[1].windw").
func TestUnknownFieldNamedByPath(t *testing.T) {
	const policy = `{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s"}`
	for body, field := range map[string]string{
		`{"tenant":"acme","checks":[{"policy":` + policy + `},{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"windw":"60s"}}]}`: "checks[1].policy.windw",
		`{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s","penalty":{"aftr":2}}}]}`:     "checks[0].policy.penalty.aftr",
		`{"tenant":"acme","checks":[{"kye":"k","policy":` + policy + `}]}`:                                                                  "checks[0].kye",
		`{"tenant":"acme","hitz":1,"checks":[{"policy":` + policy + `}]}`:                                                                   "hitz",
		// An unknown member after a known one of the same name in another case.
		`{"tenant":"acme","checks":[{"policy":{"NAME":"p","algorithm":"fixed_window","limit":3,"window":"60s","Windw":1}}]}`: "checks[0].policy.Windw",
	} {
		_, err := decodeCheckBody([]byte(body))
		if got := sluice.FieldOf(err); got != field {
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}

	for body, field := range map[string]string{
		`{"id":"t","overrides":{"chat":{"limit":3,"windw":"1s"}}}`:         "overrides.chat.windw",
		`{"id":"t","settings":{"tenantConnections":3,"sesionTTL":"1m"}}`:   "settings.sesionTTL",
		`{"id":"t","overrides":{"chat":{"limit":3}},"tier":"f","tiers":1}`: "tiers",
	} {
		err := decodeStrict([]byte(body), new(tenantJSON), "")
		if got := sluice.FieldOf(err); got != field {
			t.Errorf("tenant %s: %v, want an error naming %s", body, err, field)
		}
	}
	// A lease's inline policy, decoded apart under its name.
	_, err := decodePolicy([]byte(`{"name":"p","algorithm":"concurrency","limit":3,"penalty":{"after":1,"bse":"1s"}}`), "policy")
	if got := sluice.FieldOf(err); got != "policy.penalty.bse" {
		t.Errorf("lease policy: %v, want an error naming policy.penalty.bse", err)
	}
}

// TestWrongKindOfBody: a body that is not the object a route wants says
// so, on every route that decodes one.
func TestWrongKindOfBody(t *testing.T) {
	for _, v := range []any{new(leaseRequest), new(tenantJSON), new(keyRequest), new(tryRequest), new(blockRequest)} {
		err := decodeStrict([]byte(`[]`), v, "")
		if got, want := fmt.Sprint(err), "body must be a JSON object, got array"; got != want {
			t.Errorf("%T: %q, want %q", v, got, want)
		}
	}
}
