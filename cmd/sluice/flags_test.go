package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestAllowedOriginsFlag: origin patterns are parsed and checked; "*", which
// would let any web page use a stolen session id, and broken patterns are
// refused, naming the flag.
func TestAllowedOriginsFlag(t *testing.T) {
	c, err := parseServe([]string{"--ws-allowed-origins", "app.example.com, https://*.example.com"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.WSOrigins, []string{"app.example.com", "https://*.example.com"}) {
		t.Fatalf("parsed %q, %v", c.WSOrigins, err)
	}
	for _, bad := range []string{"*", "[a-"} {
		if _, err := parseServe([]string{"--ws-allowed-origins", bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--ws-allowed-origins") {
			t.Errorf("%q: %v, want an error naming --ws-allowed-origins", bad, err)
		}
	}
}
