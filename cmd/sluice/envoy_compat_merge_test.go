package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var compatMerge = map[string]string{
	"a.yaml": "domain: shop\ndescriptors:\n  - key: tenant\n    value: acme\n    rate_limit: {unit: year, requests_per_unit: 1}\n",
	"b.yaml": "domain: shop\ndescriptors:\n  - key: tenant\n    value: globex\n    rate_limit: {unit: year, requests_per_unit: 2}\n",
}

// TestEnvoyCompatMergeDomains: with --envoy-merge-domains, two files of
// one domain load as one; a file that repeats a descriptor of another is
// rejected on reload, naming it, and the configuration in force stays.
// Without the flag, the server does not start.
func TestEnvoyCompatMergeDomains(t *testing.T) {
	r, p := startCompat(t, compatMerge, "--envoy-merge-domains")
	wantStatus(t, "acme", r.ask("shop", desc("tenant", "acme")).Statuses[0], ok, 1, 0)
	wantStatus(t, "globex", r.ask("shop", desc("tenant", "globex")).Statuses[0], ok, 2, 1)

	dir := p.cmd.Args[slices.Index(p.cmd.Args, "--envoy-config")+1]
	writeFileAtomic(t, filepath.Join(dir, "c.yaml"), []byte("domain: shop\ndescriptors:\n  - key: tenant\n    value: acme\n    rate_limit: {unit: year, requests_per_unit: 1000}\n"))
	waitFor(t, "the rejection of c.yaml", func() bool {
		return strings.Contains(p.log(), "c.yaml") && strings.Contains(p.log(), `duplicate descriptor \"shop.tenant_acme\"`)
	})
	wantStatus(t, "acme, after c.yaml", r.ask("shop", desc("tenant", "acme")).Statuses[0], over, 1, 0)

	out, err := serveRefused(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", compatDir(t, compatMerge))
	if err == nil || !strings.Contains(out, "b.yaml") || !strings.Contains(out, "--envoy-merge-domains") {
		t.Errorf("without merging: %v\n%s", err, out)
	}
}
