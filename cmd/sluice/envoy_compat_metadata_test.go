package main

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

// compatMetadata has two rules with metadata, in quota mode, as the
// reference's example configuration has them, and a domain beside it.
var compatMetadata = map[string]string{
	"services.yaml": `domain: services
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2, tier: gold}
`,
	"other.yaml": `domain: other
descriptors:
  - key: service
    rate_limit: {unit: year, requests_per_unit: 2}
`,
}

// TestEnvoyCompatDynamicMetadata: with --envoy-dynamic-metadata, the
// answer's dynamic metadata holds the domain, the descriptors and the
// merged metadata of the rules of the descriptors that passed (the first
// value of a key winning); another domain's answer none of it; and without
// the flag there is none.
func TestEnvoyCompatDynamicMetadata(t *testing.T) {
	r, _ := startCompat(t, compatMetadata, "--envoy-dynamic-metadata")
	s1, s2 := desc("service", "service_1"), desc("service", "service_2")
	resp := r.ask("services", s1, s2)
	got, _ := protojson.Marshal(resp.DynamicMetadata)
	want := `{"descriptors":[{"entries":["service=service_1"]},{"entries":["service=service_2"]}],"domain":"services",` +
		`"metadata":{"service_with_quota":{"name":"service_1","tier":"gold"}}}`
	if !sameJSON(t, got, want) {
		t.Errorf("both passed:\n got %s\nwant %s", got, want)
	}
	resp = r.ask("services", s1, s2) // service_1 is over its quota now
	if resp.OverallCode != ok {
		t.Errorf("service_1 over, service_2 within: %v, want OK", resp.OverallCode)
	}
	got, _ = protojson.Marshal(resp.DynamicMetadata.GetFields()["metadata"])
	if want := `{"service_with_quota":{"name":"service_2","tier":"gold"}}`; !sameJSON(t, got, want) {
		t.Errorf("service_1 over: metadata %s, want %s", got, want)
	}
	resp = r.ask("other", s1)
	if _, has := resp.DynamicMetadata.GetFields()["metadata"]; has || resp.DynamicMetadata.GetFields()["domain"].GetStringValue() != "other" {
		t.Errorf("another domain: %v", resp.DynamicMetadata)
	}

	r, _ = startCompat(t, compatMetadata)
	if resp := r.ask("services", s1); resp.DynamicMetadata != nil {
		t.Errorf("without the flag: %v", resp.DynamicMetadata)
	}
}
