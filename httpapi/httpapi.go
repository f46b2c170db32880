// Package httpapi serves Sluice's HTTP JSON API (docs/api.md has every
// route, request and response):
//
//	POST   /v1/check                          decide a request: named or inline policies
//	POST   /v1/leases                         acquire a concurrency lease
//	POST   /v1/leases/{token}/renew           renew it
//	DELETE /v1/leases/{token}                 release it
//	GET    /v1/tenants, POST /v1/tenants      list, create tenants (admin)
//	GET    /v1/tenants/{id}, PUT, DELETE      read, replace, delete a tenant
//	POST   /v1/tenants/{id}/keys, GET         create (shown once), list API keys
//	DELETE /v1/tenants/{id}/keys/{key}        delete an API key
//	PUT    /v1/tenants/{id}/sessions          create a session (server-chosen id)
//	GET    /v1/tenants/{id}/sessions/{s}, DELETE  read, delete a session
//	POST   /v1/tenants/{id}/erase             erase one key's state (docs/privacy.md)
//	GET    /v1/policies                       the configured policies
//	POST   /v1/upstreams/{name}/acquire       wait for a fair share of an upstream quota
//	ANY    /v1/upstreams/{name}/proxy/{path...}  wait for it, and have the server make the call
//	GET    /v1/upstreams, /v1/upstreams/{name}  upstreams' configuration and state (admin)
//	GET    /healthz, /readyz, /metrics        operations
//	GET    /v1/openapi.json                   this API's OpenAPI 3.1 document (package openapi)
//
// Other packages' routes go behind its authentication, mounted before it
// serves: the node-to-node protocol's connection routes (peer.Mount, over
// TenantRoute) and the dashboard's insight routes (insighthttp, over Route
// and Authenticate).
//
// Every response body is JSON. A decision answers 200 when allowed and 429
// when denied, with the IETF RateLimit headers, the X-RateLimit-* headers
// and Retry-After; bad input answers 400 with an error naming the field and
// counts nothing, and a body over MaxBodyBytes 413; unknown routes 404; a
// missing or unknown key 401; a key reaching for another tenant 403. Before
// any route, a request of a host the server does not answer, or a page's
// request of another origin that would change state, answers 403
// (browser.go).
//
// The routes translate HTTP alone: they read the bearer token and decode,
// ask the tenant layer (package tenancy: who the caller is, what it
// reaches, what a change may be and what the audit trail records of it)
// and the limiter, and encode.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logevery"
	"github.com/sluicehq/sluice/openapi"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// Options configures a Handler. Limiter and Tenancy are required: the
// stores, behind the tenant layer, are the server's to choose
// (internal/server), never the transport's.
type Options struct {
	Limiter sluice.LeaseLimiter
	// Tenancy is the tenant layer: who a request comes from (its API
	// keys, or its admin key: with none, no authentication, for a server
	// bound to loopback, which then answers only loopback hosts and
	// AllowedHosts), and every tenant, key, block, session and lease token
	// the routes reach.
	Tenancy *tenancy.Service
	// Gateway serves GET /v1/ws (WebSocket connects, which authenticate by
	// their session) and GET /v1/ws/admit. Optional.
	Gateway Gateway
	// AllowedHosts are the host names, besides loopback ones, that the
	// server answers: patterns matched as path.Match does, in any case,
	// against a request's Host with its port and without ("sluice.internal",
	// "*.corp.example.com", "sluice.internal:8443"). A server without an
	// admin key (Tenancy's) answers only these and loopback names
	// (localhost, 127.0.0.1, [::1], any port), so that a page whose name is
	// pointed at loopback (DNS rebinding) reads nothing; with one, only if
	// some are given.
	// Other requests answer 403 (browser.go).
	AllowedHosts []string
	// AllowedOrigins are the browser origins, besides the server's own,
	// whose pages may make requests that change state (POST, PUT, PATCH,
	// DELETE): host patterns ("app.example.com", "*.example.com") or, with
	// a scheme, origin patterns ("https://*.example.com"), as the gateway's.
	// A request whose Origin is neither answers 403 before any route;
	// requests without one (not from a page) are let through (browser.go).
	AllowedOrigins []string
	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// when finding a client's IP.
	TrustedProxies []netip.Prefix
	// Upstreams are the fair-share upstream quotas, by name; their owner
	// closes them. Optional.
	Upstreams map[string]Upstream
	// Ready reports whether the store answers, for /readyz. Optional.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics. Optional.
	Metrics http.Handler
	// Page serves GET / (the gateway's demo page). Optional.
	Page http.Handler
	// Dashboard serves GET /dashboard and the files under it (the
	// operator's dashboard, package web). Optional.
	Dashboard http.Handler
	// Now is the clock of timestamps and headers. Default time.Now.
	Now func() time.Time
	// Logger receives errors. Default: discard.
	Logger *slog.Logger
}

// Gateway is the WebSocket gateway's HTTP side: its connects and its
// admission check. Its connection management API is the node-to-node
// protocol's (peer.Mount, over TenantRoute).
type Gateway interface {
	http.Handler
	AdmitHandler(w http.ResponseWriter, r *http.Request)
}

// Handler serves the API. Create it with New.
type Handler struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	// checkRoute serves POST /v1/check, as the mux routes it.
	checkRoute http.HandlerFunc
	allow      map[string][]string // pattern path -> methods, for 405's Allow
	// checkHost: the server answers only loopback and allowed hosts
	// (Options.AllowedHosts).
	checkHost bool
	// tenants answers who a tenant is and what it may do.
	tenants *tenancy.Service
	// storeLog bounds the lines of a tenant store's failure, which every
	// request meets during an outage, to one an interval.
	storeLog logevery.Gate
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Tenancy == nil {
		// The tenants' stores are the server's: a transport that made
		// them up would answer from stores no other front door sees.
		panic("httpapi.New: Options.Tenancy is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, log: opts.Logger, mux: http.NewServeMux(), allow: map[string][]string{},
		checkHost: !opts.Tenancy.RequiresKey() || len(opts.AllowedHosts) > 0, tenants: opts.Tenancy}
	h.checkRoute = h.route("POST", "/v1/check", h.check)
	h.route("POST", "/v1/leases", h.acquire)
	h.route("POST", "/v1/leases/{token}/renew", h.renew)
	h.route("DELETE", "/v1/leases/{token}", h.release)
	h.route("GET", "/v1/tenants", h.listTenants)
	h.route("POST", "/v1/tenants", h.createTenant)
	h.route("GET", "/v1/tenants/{id}", h.getTenant)
	h.tenantRoute("GET", "/v1/tenants/{id}/limits", h.tenantLimits)
	h.route("PUT", "/v1/tenants/{id}", h.putTenant)
	h.route("DELETE", "/v1/tenants/{id}", h.deleteTenant)
	h.route("POST", "/v1/tenants/{id}/keys", h.createKey)
	h.route("GET", "/v1/tenants/{id}/keys", h.listKeys)
	h.route("DELETE", "/v1/tenants/{id}/keys/{key}", h.deleteKey)
	h.route("PUT", "/v1/tenants/{id}/sessions", h.createSession)
	h.route("GET", "/v1/tenants/{id}/sessions/{session}", h.getSession)
	h.route("DELETE", "/v1/tenants/{id}/sessions/{session}", h.deleteSession)
	h.route("GET", "/v1/policies", h.policies)
	h.route("POST", "/v1/upstreams/{name}/acquire", h.acquireUpstream)
	h.routeProxy()
	h.route("GET", "/v1/upstreams", h.listUpstreams)
	h.route("GET", "/v1/upstreams/{name}", h.getUpstream)
	h.routeBlocks()
	h.routeErase()
	if opts.Gateway != nil {
		// A connect proves itself by its session id, which only its
		// tenant's session creation returned: browsers cannot send an
		// Authorization header on a WebSocket handshake.
		h.mux.Handle("GET /v1/ws", opts.Gateway)
		h.mux.HandleFunc("GET /v1/ws/admit", opts.Gateway.AdmitHandler)
		h.allow["/v1/ws"] = []string{"GET"}
		h.allow["/v1/ws/admit"] = []string{"GET"}
	}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	h.allow["/healthz"] = []string{"GET"}
	// The API's contract, which names no tenant's data: public, as the
	// probes, but behind the host rule.
	h.mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(openapi.JSON) // the client may be gone; nothing to do
	})
	h.allow["/v1/openapi.json"] = []string{"GET"}
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.allow["/readyz"] = []string{"GET"}
	if opts.Page != nil {
		h.mux.Handle("GET /{$}", opts.Page)
		h.allow["/"] = []string{"GET"}
	}
	if opts.Dashboard != nil {
		// The page and its files; the page reads the /v1 routes with the
		// key its user gives it, behind the same walls as any client.
		h.mux.Handle("GET /dashboard", opts.Dashboard)
		h.mux.Handle("GET /dashboard/", opts.Dashboard)
		h.allow["/dashboard"] = []string{"GET"}
	}
	if opts.Metrics != nil {
		h.mux.Handle("GET /metrics", opts.Metrics)
		h.allow["/metrics"] = []string{"GET"}
	}
	return h
}

// authedHandler is a /v1 handler with the request's principal.
type authedHandler func(w http.ResponseWriter, r *http.Request, p principal)

// route routes method and path to fn, and returns the handler routed.
func (h *Handler) route(method, path string, fn authedHandler) http.HandlerFunc {
	hf := func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r.Context(), r)
		if err != nil {
			writeError(w, err)
			return
		}
		if !p.Admin {
			noteTenant(w, p.Tenant)
		}
		fn(w, r, p)
	}
	h.mux.HandleFunc(method+" "+path, hf)
	h.allow[path] = append(h.allow[path], method)
	return hf
}

// tenantRoute routes a tenant's path, /v1/tenants/{id}/...: the caller must
// reach tenant {id} (403 otherwise) and fn gets its id.
func (h *Handler) tenantRoute(method, path string, fn func(w http.ResponseWriter, r *http.Request, tenant string)) {
	h.route(method, path, func(w http.ResponseWriter, r *http.Request, who principal) {
		tenant := r.PathValue("id")
		if !who.Can(tenant) {
			writeError(w, tenancy.ErrForbidden)
			return
		}
		noteTenant(w, tenant)
		fn(w, r, tenant)
	})
}

// TenantRoute routes a tenant's path, /v1/tenants/{id}/..., to fn behind
// the API's authentication, as the API's own: the caller must reach
// tenant {id} (403 otherwise) and fn gets its id. For the routes of other
// packages (peer.Mount), routed before the handler serves.
func (h *Handler) TenantRoute(method, path string, fn func(w http.ResponseWriter, r *http.Request, tenant string)) {
	h.tenantRoute(method, path, fn)
}

// Route routes method and path to fn behind the API's authentication, as
// the API's own: fn gets the request's principal. For the routes of other
// packages (insighthttp's Mount), routed before the handler serves.
func (h *Handler) Route(method, path string, fn func(w http.ResponseWriter, r *http.Request, who tenancy.Principal)) {
	h.route(method, path, fn)
}

// Authenticate returns who sent r, as the routes authenticate it: for a
// request held open (an insight stream) that asks again.
func (h *Handler) Authenticate(r *http.Request) (tenancy.Principal, error) {
	return h.authenticate(r.Context(), r)
}

// ServeHTTP routes r, answering unknown routes 404 and known paths with the
// wrong method 405, in JSON like every other error. A request of a host
// the server does not answer, or a page's request of another origin that
// would change state, is refused 403 first (browser.go); but for the
// health probes, which say only whether the server lives and its store
// answers, and which probes and load balancers send by address.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.checkBrowser(r); err != nil && !healthProbe(r) {
		writeError(w, err)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/check" && r.URL.RawPath == "" {
		// The route of nearly every request, served as the mux would
		// serve it, with the pattern it would set (which the access log
		// reads), without finding it twice.
		r.Pattern = "POST /v1/check"
		h.checkRoute(w, r)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		if methods := h.methodsFor(r); methods != nil {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, wire.Error{Error: "method_not_allowed", Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)})
			return
		}
		writeError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Routes returns every route the handler serves, "METHOD /path" with the
// mux's path patterns ("GET /v1/tenants/{id}"), sorted: its own, the
// operations' and those routed by other packages (TenantRoute, Route)
// so far. The OpenAPI document's test holds it to the document.
func (h *Handler) Routes() []string {
	var routes []string
	for path, methods := range h.allow {
		for _, m := range methods {
			routes = append(routes, m+" "+path)
		}
	}
	slices.Sort(routes)
	return routes
}

// methodsFor returns the methods of the route r's path matches, or nil.
func (h *Handler) methodsFor(r *http.Request) []string {
	for path, methods := range h.allow {
		probe := r.Clone(r.Context())
		probe.Method = methods[0]
		if _, pattern := h.mux.Handler(probe); pattern != "" && strings.HasSuffix(pattern, " "+path) {
			return methods
		}
	}
	return nil
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := h.opts.Ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeError and writeJSON answer through the wire package: one error body
// and one table from error kinds to statuses for every transport (a body
// over MaxBodyBytes answers 413, naming the field "body").
func writeError(w http.ResponseWriter, err error) { wire.WriteError(w, err) }

func writeJSON(w http.ResponseWriter, status int, v any) { wire.WriteJSON(w, status, v) }
