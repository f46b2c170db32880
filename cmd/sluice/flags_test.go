package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestAllowedOriginsFlag: origin patterns are parsed and checked; patterns
// that would let any web page use a stolen session id ("*", "*.*",
// "https://*", "*.com") and broken ones are refused, naming the flag.
func TestAllowedOriginsFlag(t *testing.T) {
	c, err := parseServe([]string{"--ws-allowed-origins", "app.example.com, https://*.example.com, localhost:*"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.WSOrigins, []string{"app.example.com", "https://*.example.com", "localhost:*"}) {
		t.Fatalf("parsed %q, %v", c.WSOrigins, err)
	}
	for _, bad := range []string{"*", "[a-", "*.*", "https://*", "*.com", "http://*:8080", "?*"} {
		if _, err := parseServe([]string{"--ws-allowed-origins", bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--ws-allowed-origins") {
			t.Errorf("%q: %v, want an error naming --ws-allowed-origins", bad, err)
		}
	}
}
