// Package loopback says whether an address stays on this machine: the
// server listens off it only with an admin key, and the load generators
// send traffic only to it.
package loopback

import (
	"net"
	"net/netip"
)

// Host reports whether host is localhost or a loopback address.
func Host(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Addr reports whether addr, a host and a port, is on localhost or a
// loopback address.
func Addr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Host(host)
}
