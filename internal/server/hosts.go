package server

import (
	"net"
	"net/http"
	"net/http/pprof"
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

var patternEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)

// advertise returns the node's base URL for other nodes.
func (c Config) advertise(ln net.Listener) string {
	if c.AdvertiseURL != "" {
		return strings.TrimRight(c.AdvertiseURL, "/")
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
