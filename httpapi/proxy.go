package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/forward"
	"github.com/sluicehq/sluice/wire"
)

// proxyMethods are the methods a proxied call may have: not CONNECT or
// TRACE.
var proxyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// routeProxy routes ANY /v1/upstreams/{name}/proxy/{path...}.
func (h *Handler) routeProxy() {
	for _, m := range proxyMethods {
		h.route(m, "/v1/upstreams/{name}/proxy/{path...}", h.proxyUpstream)
	}
}

var proxyFields = callFields{wire.HeaderTenant, wire.HeaderKey, wire.HeaderCost, wire.HeaderMaxWait}

// proxyUpstream: ANY /v1/upstreams/{name}/proxy/{path...}. The call waits
// for its customer's turn as an acquire does (refused 429 as an acquire
// is), then the server sends it to the upstream's configured address, at
// path under it, and passes the answer back (forward.Forwarder.Send). Its
// body is read whole before it waits.
func (h *Handler) proxyUpstream(w http.ResponseWriter, r *http.Request, who principal) {
	name := r.PathValue("name")
	up, ok := h.opts.Upstreams[name]
	if !ok {
		writeError(w, errNoUpstream(name))
		return
	}
	if up.Proxy == nil {
		writeError(w, &sluice.Error{Kind: sluice.KindNotFound, Field: "name", Message: "upstream " + strconv.Quote(name) + " has no proxy: acquire, then call it"})
		return
	}
	c, err := proxyCall(r, up)
	if err == nil {
		c.tenant, err = who.TenantOf(c.tenant)
	}
	if err == nil {
		err = c.check(up, proxyFields)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	target, err := up.Proxy.URL(proxiedPath(r), r.URL.RawQuery)
	if err != nil {
		writeError(w, err)
		return
	}
	leave, err := up.Proxy.Enter(c.tenant)
	if err != nil {
		whose := "server"
		if err == forward.ErrTenantBusy {
			whose = "tenant"
		}
		wire.WriteProxyBusy(w, name, whose)
		return
	}
	defer leave()
	body, err := up.Proxy.ReadBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	g, ok := h.grant(w, r, name, up, c, up.Proxy.Timeout())
	if !ok {
		return
	}
	w.Header().Set(wire.HeaderGrantedAt, g.At.UTC().Format(time.RFC3339Nano))
	w.Header().Set(wire.HeaderWaitedMs, strconv.FormatInt(g.Waited.Milliseconds(), 10))
	up.Proxy.Send(w, r, forward.Call{URL: target, Body: body, Granted: g.At})
}

// proxyCall reads a proxied call's customer, cost and wait from its
// headers; each may be given once.
func proxyCall(r *http.Request, up Upstream) (call, error) {
	c := call{cost: 1, maxWait: up.MaxWait}
	for _, name := range proxyFields {
		vs := r.Header.Values(name)
		if len(vs) > 1 {
			return c, sluice.Invalid(name, "is given %d times", len(vs))
		}
		if len(vs) == 0 {
			continue
		}
		v := vs[0]
		switch name {
		case wire.HeaderTenant:
			c.tenant = v
		case wire.HeaderKey:
			c.key = v
		case wire.HeaderCost:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, sluice.Invalid(name, "must be a whole number, got %q", v)
			}
			c.cost = n
		case wire.HeaderMaxWait:
			c.maxWait, c.maxWaitErr = time.ParseDuration(v)
		}
	}
	return c, nil
}

// proxiedPath returns the path of r under .../proxy/, as r escaped it:
// the segments after the fifth of /v1/upstreams/{name}/proxy/{path...}.
func proxiedPath(r *http.Request) string {
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 6)
	if len(parts) < 6 {
		return ""
	}
	return parts[5]
}
