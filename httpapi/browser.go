package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// The walls against a browser turned on the operator. A server without an
// admin key (bound to loopback, for development) trusts whoever reaches
// it, and a browser on the same machine reaches it for any page it shows:
//
//   - A page of another origin can send a "simple" request (a form's POST,
//     or fetch with a text/plain body) without asking the server first
//     (CORS preflight), and so block keys or create tenants. Browsers send
//     Origin with every request but GET and HEAD (Fetch standard), so a
//     request that changes state (POST, PUT, PATCH, DELETE) whose Origin is
//     neither this server's own nor an allowed one is refused; and one that
//     carries an Origin, thus comes from a page, and has a body must send it
//     as application/json, which no page of another origin can do without a
//     preflight that Sluice never grants. Requests without Origin (curl,
//     SDKs, other servers; curl's -d sends form-urlencoded) are not from a
//     page, and are held to neither rule.
//   - DNS rebinding: a page of rebind.attacker.example, its name then
//     pointed at 127.0.0.1, is same-origin with this server and reads all
//     it answers. Its requests name their host, so a server without an
//     admin key answers only loopback names (localhost, 127.0.0.1, [::1],
//     any port) and Options.AllowedHosts.
//
// Both walls answer 403 before any route, with the error body naming what
// was refused.

// stateChanging reports whether method changes state.
func stateChanging(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// checkBrowser returns the error that refuses r, or nil: the Host wall,
// then, for a request that changes state, the Origin wall.
func (h *Handler) checkBrowser(r *http.Request) error {
	if h.checkHost && !h.hostAllowed(r.Host) {
		return &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf(
			"host %q is not served here: a server without an admin key answers only loopback names (localhost, 127.0.0.1, [::1]) and its allowed hosts (--allowed-hosts)", r.Host)}
	}
	if !stateChanging(r.Method) {
		return nil
	}
	origin, ok := r.Header["Origin"]
	if !ok {
		return nil // not from a page
	}
	o := ""
	if len(origin) > 0 {
		o = origin[0]
	}
	if !h.originAllowed(o, r.Host) {
		return &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf(
			"origin %q may not change anything here: only pages of this server's own origin and of its allowed origins (--allowed-origins) may", o)}
	}
	if r.ContentLength != 0 {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf(
				"a page's request must send its body as application/json, not %q", r.Header.Get("Content-Type"))}
		}
	}
	return nil
}

// hostAllowed reports whether host, a request's Host (a name or an
// address, with or without a port), is one this server answers: a
// loopback name, or one matching an allowed host pattern, with or without
// its port. A request without a Host (HTTP/1.0) is not a browser's.
func (h *Handler) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	} else {
		name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "localhost" {
		return true
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Unmap().IsLoopback() {
		return true
	}
	full := strings.ToLower(host)
	for _, pat := range h.opts.AllowedHosts {
		pat = strings.ToLower(pat)
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
		if ok, _ := path.Match(pat, full); ok {
			return true
		}
	}
	return false
}

// originAllowed reports whether origin, a request's Origin, is this
// server's own (its host, as the request names it, whatever the scheme: a
// proxy in front may end TLS) or matches an allowed origin pattern: a host
// pattern ("app.example.com", "*.example.com") or, with a scheme, an
// origin pattern ("https://*.example.com"), as the gateway's
// AllowedOrigins are. "null" (a sandboxed or file page, or one that hides
// its origin) is no origin of either.
func (h *Handler) originAllowed(origin, host string) bool {
	return gateway.OriginAllowed(origin, host, h.opts.AllowedOrigins)
}

// healthProbe reports whether r is a health probe (GET or HEAD of /healthz
// or /readyz), which the Host wall lets through: a kubelet or a load
// balancer sends it to the node's address, which --allowed-hosts need not
// name, and its answer tells a page nothing (ok, or which store is down).
func healthProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.RawPath == "" &&
		(r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}
