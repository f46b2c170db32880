package server

import (
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// allowedHosts returns the hosts the server answers besides loopback
// names, when it answers only some (httpapi.Options.AllowedHosts): those
// of --allowed-hosts, and the host of its advertised URL, by which the
// other nodes reach it.
func (c Config) allowedHosts(ln net.Listener) []string {
	if c.AdminKey != "" && len(c.AllowedHosts) == 0 {
		return nil // any host: the key is the wall
	}
	hosts := slices.Clip(c.AllowedHosts)
	if u, err := url.Parse(c.advertise(ln)); err == nil && u.Hostname() != "" {
		// Literally: a pattern's special characters escaped.
		hosts = append(hosts, patternEscaper.Replace(u.Hostname()))
	}
	return hosts
}

// BracketIPv6 returns the URL u with an IPv6 address written bare in its
// host, as a template writes http://$(POD_IP):8080 with an IPv6 pod
// address, put in brackets (http://[fd00::5]:8080): the form a Host
// header carries and a dialer takes. Other URLs are returned as they are.
func BracketIPv6(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	if strings.HasPrefix(host, "[") || strings.Count(host, ":") < 2 {
		return u
	}
	// fd00::5:8080 reads as an address and a port, or as an address
	// alone: a node's URL names its port, so the port it is.
	i := strings.LastIndexByte(host, ':')
	if a, err := netip.ParseAddr(host[:i]); err == nil && a.Is6() && host[i+1:] != "" {
		return scheme + "://" + net.JoinHostPort(host[:i], host[i+1:]) + path
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return scheme + "://[" + host + "]" + path // no port
	}
	return u
}

var patternEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)

// advertise returns the node's base URL for other nodes.
func (c Config) advertise(ln net.Listener) string {
	if c.AdvertiseURL != "" {
		return BracketIPv6(strings.TrimRight(c.AdvertiseURL, "/"))
	}
	if c.TLS.CertFile != "" {
		return "https://" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}

// debugMux serves Go's profiles.
func debugMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}
