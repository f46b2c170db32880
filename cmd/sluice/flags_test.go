package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
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

// The region flags: a node's region and the table's regions, on DynamoDB
// only; a bad combination is an error naming the flag.
func TestRegionFlags(t *testing.T) {
	c, err := parseServe([]string{"--store", "dynamodb", "--region-id", "eu", "--regions", "us, eu,ap"}, io.Discard, io.Discard)
	if err != nil || c.RegionID != "eu" || strings.Join(c.Regions, ",") != "us,eu,ap" {
		t.Fatalf("%+v %v", c.Regions, err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--store", "memory", "--region-id", "eu", "--regions", "eu"}, "--region-id"},
		{[]string{"--store", "dynamodb", "--region-id", "eu", "--regions", "us,ap"}, "--region-id"},
		{[]string{"--store", "dynamodb", "--regions", "us,ap"}, "--regions"},
	} {
		if _, err := parseServe(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// TestAllowedHostsFlags: --allowed-hosts takes host patterns (no scheme,
// none that would match any host), --allowed-origins origin patterns as
// --ws-allowed-origins does; a bad one is an error naming its flag.
func TestAllowedHostsFlags(t *testing.T) {
	c, err := parseServe([]string{"--allowed-hosts", "sluice.test, *.corp.example.com,pinned.example.com:8443", "--allowed-origins", "https://app.example.com"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.AllowedHosts, []string{"sluice.test", "*.corp.example.com", "pinned.example.com:8443"}) || !slices.Equal(c.AllowedOrigins, []string{"https://app.example.com"}) {
		t.Fatalf("parsed %q %q, %v", c.AllowedHosts, c.AllowedOrigins, err)
	}
	for _, tc := range []struct{ flag, bad string }{
		{"--allowed-hosts", "*"}, {"--allowed-hosts", "*.com"}, {"--allowed-hosts", "https://sluice.test"}, {"--allowed-hosts", "sluice.test/x"}, {"--allowed-hosts", "[a-"},
		{"--allowed-origins", "*"}, {"--allowed-origins", "https://*"}, {"--allowed-origins", "*.*"},
	} {
		if _, err := parseServe([]string{tc.flag, tc.bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s %q: %v, want an error naming %s", tc.flag, tc.bad, err, tc.flag)
		}
	}
}

// TestGatewayTimingFlags: --heartbeat and --ws-session-check take
// durations within their bounds; one outside is an error naming its flag.
func TestGatewayTimingFlags(t *testing.T) {
	c, err := parseServe([]string{"--heartbeat", "2s", "--ws-session-check", "5m"}, io.Discard, io.Discard)
	if err != nil || c.Heartbeat != 2*time.Second || c.WSCheck != 5*time.Minute {
		t.Fatalf("%v %v %v", c.Heartbeat, c.WSCheck, err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--heartbeat", "10ms"}, "--heartbeat"},
		{[]string{"--heartbeat", "2m"}, "--heartbeat"},
		{[]string{"--ws-session-check", "100ms"}, "--ws-session-check"},
		{[]string{"--ws-session-check", "2h"}, "--ws-session-check"},
	} {
		if _, err := parseServe(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// TestAdvertiseURLFlag: --advertise-url is a node's base URL, an IPv6
// address written bare (a template's $(POD_IP)) included; anything else is
// an error naming the flag. And --key-secret-file alone, without
// --pseudonymise-keys, is refused: it would leave keys in the clear while
// its operator believes otherwise.
func TestAdvertiseURLFlag(t *testing.T) {
	for _, good := range []string{"http://10.0.0.5:8080", "https://node-1.sluice.internal", "http://fd00:10:244::5:8080"} {
		if _, err := parseServe([]string{"--advertise-url", good}, io.Discard, io.Discard); err != nil {
			t.Errorf("--advertise-url %s: %v", good, err)
		}
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--advertise-url", "not a url"}, "--advertise-url"},
		{[]string{"--advertise-url", "ftp://10.0.0.5"}, "--advertise-url"},
		{[]string{"--advertise-url", "http://10.0.0.5:8080?x=1"}, "--advertise-url"},
		{[]string{"--key-secret-file", "/dev/null"}, "--pseudonymise-keys"},
	} {
		if _, err := parseServe(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}
