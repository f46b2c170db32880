package loopback

import "testing"

func TestAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:0": true, "127.0.0.2:1": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "192.0.2.1:80": false,
		"example.com:80": false, "127.0.0.1": false,
	} {
		if got := Addr(addr); got != want {
			t.Errorf("Addr(%q) = %v, want %v", addr, got, want)
		}
	}
}
