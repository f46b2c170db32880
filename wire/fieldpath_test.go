package wire

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestUnknownFieldNamedByPath: a member no field takes is named by its
// path from the body, however deep, by the check route's decoders (the
// fast one hands every error to encoding/json's) and by DecodeStrict and
// DecodePolicy; encoding/json alone names it without its path
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
		_, err := DecodeCheck([]byte(body))
		if got := sluice.FieldOf(err); got != field {
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}
	// A lease's inline policy, decoded apart under its name.
	_, err := DecodePolicy([]byte(`{"name":"p","algorithm":"concurrency","limit":3,"penalty":{"after":1,"bse":"1s"}}`), "policy")
	if got := sluice.FieldOf(err); got != "policy.penalty.bse" {
		t.Errorf("lease policy: %v, want an error naming policy.penalty.bse", err)
	}
}

// TestDecodeStrictErrors: each way a body can be wrong, said of the body
// or of the field under the prefix.
func TestDecodeStrictErrors(t *testing.T) {
	for _, tc := range []struct {
		body, prefix, want string
	}{
		{``, "", "body is empty: want a JSON object"},
		{`[]`, "", "body must be a JSON object, got array"},
		{`{"name":1}`, "policy", "policy.name must be string, got number"},
		{`{"name":"p"} {}`, "", "body has data after the JSON value"},
		{`{"name":"p"`, "checks[0].policy", "checks[0].policy is truncated JSON"},
		{`{"nme":"p"}`, "policy", "policy.nme is not a known field"},
	} {
		var p Policy
		if got := fmt.Sprint(DecodeStrict([]byte(tc.body), &p, tc.prefix)); got != tc.want {
			t.Errorf("%q under %q: %q, want %q", tc.body, tc.prefix, got, tc.want)
		}
	}
}
