package insighthttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// Mount routes the dashboard's routes on rt, which authenticates them.
// They read what this node decided (package insight):
//
//	GET /v1/insight                       the admin's: every tenant's and policy's counts per second
//	GET /v1/insight/top?policy=P          the admin's: P's heaviest keys, of every tenant
//	GET /v1/tenants/{id}/insight          a tenant's counts per second
//	GET /v1/tenants/{id}/insight/top?policy=P   its heaviest keys of P
//	GET /v1/insight/stream, /v1/tenants/{id}/insight/stream
//	                                      the last second's counts, every second (Server-Sent Events)
//	GET /v1/insight/history, /v1/tenants/{id}/insight/history
//	                                      counts per minute, up to a day, across restarts (history.go)
//
// seconds (default 60, at most 3600) is how far back; n (default 20, at
// most 100) how many keys. A tenant's key reaches its own tenant's routes
// only: the policy series and the admin's lists mix tenants. A tenant's
// routes answer for the tenant as created last (its creation time is part
// of its identity): what an earlier tenant of the same id decided is not
// its. A tenant's key sees its own data alone: its keys' counts without
// the sketches' errors and bounds (which come of every tenant's traffic),
// and not the nodes' addresses.
func (h *Handler) Mount(rt Router) {
	h.authenticate = rt.Authenticate
	// The admin's routes mix tenants: a tenant's key gets 403.
	type authed = func(w http.ResponseWriter, r *http.Request, who tenancy.Principal)
	admin := func(fn http.HandlerFunc) authed {
		return func(w http.ResponseWriter, r *http.Request, who tenancy.Principal) {
			if !who.Admin {
				wire.WriteError(w, tenancy.ErrAdminOnly)
				return
			}
			fn(w, r)
		}
	}
	rt.Route("GET", "/v1/insight", admin(h.insightAll))
	rt.Route("GET", "/v1/insight/top", admin(func(w http.ResponseWriter, r *http.Request) { h.insightTop(w, r, tenancy.Principal{Admin: true}, "") }))
	rt.Route("GET", "/v1/insight/stream", admin(func(w http.ResponseWriter, r *http.Request) {
		h.insightStream(w, r, tenancy.Principal{Admin: true}, "", true)
	}))
	rt.Route("POST", "/v1/insight/try", admin(func(w http.ResponseWriter, r *http.Request) { h.insightTry(w, r, "") }))
	rt.Route("GET", "/v1/insight/gateway", admin(h.insightGateway))
	rt.Route("GET", "/v1/insight/history", admin(h.historyAll)) // history.go
	// A tenant's routes: its key, or the admin's.
	tenant := func(fn func(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string)) authed {
		return func(w http.ResponseWriter, r *http.Request, who tenancy.Principal) {
			tenant := r.PathValue("id")
			if !who.Can(tenant) {
				wire.WriteError(w, tenancy.ErrForbidden)
				return
			}
			fn(w, r, who, tenant)
		}
	}
	rt.Route("GET", "/v1/tenants/{id}/insight", tenant(h.insightTenant))
	rt.Route("GET", "/v1/tenants/{id}/insight/top", tenant(h.insightTop))
	rt.Route("GET", "/v1/tenants/{id}/insight/history", tenant(h.historyTenant))
	rt.Route("GET", "/v1/tenants/{id}/insight/stream", tenant(func(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string) {
		h.insightStream(w, r, who, tenant, false)
	}))
	rt.Route("POST", "/v1/tenants/{id}/insight/try", tenant(func(w http.ResponseWriter, r *http.Request, _ tenancy.Principal, tenant string) {
		h.insightTry(w, r, tenant)
	}))
}

// tenantSince returns when tenant was created, as the tenant routes of
// insight read it: zero for a tenant of the configuration file, or one
// deleted and not created again (the admin's view of what it left).
func (h *Handler) tenantSince(ctx context.Context, tenant string) (time.Time, error) {
	t, err := h.tenants.Lookup(ctx, tenant)
	return t.Since(), err
}

// insightSince is tenantSince for a route's answer: a tenant that is not
// found reads from the start (the admin's, as the key of a deleted tenant
// is gone); a store that fails answers the error.
func (h *Handler) insightSince(w http.ResponseWriter, r *http.Request, tenant string) (time.Time, bool) {
	since, err := h.tenantSince(r.Context(), tenant)
	if err != nil && sluice.KindOf(err) != sluice.KindNotFound {
		wire.WriteError(w, err)
		return time.Time{}, false
	}
	return since, true
}

func errKindUnavailable(err error) bool { return sluice.KindOf(err) == sluice.KindUnavailable }

// tryRequest is the body of a try: the policy proposed, in place of the
// one of the same name whose past traffic it is tried on.
type tryRequest struct {
	Policy  *wire.Policy `json:"policy"`
	Seconds *int         `json:"seconds,omitempty"`
	Top     *int         `json:"top,omitempty"`
}

// insightTry: POST .../insight/try, what a proposed policy would have
// denied of the last hour's traffic (insight.KeySample).
func (h *Handler) insightTry(w http.ResponseWriter, r *http.Request, tenant string) {
	if !h.insightReady(w) {
		return
	}
	body, err := wire.ReadBody(w, r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var in tryRequest
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		wire.WriteError(w, err)
		return
	}
	if in.Policy == nil {
		wire.WriteError(w, sluice.Invalid("policy", "is required: the policy to try"))
		return
	}
	p, err := in.Policy.Decode("policy")
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	if err := p.Validate(); err != nil {
		wire.WriteError(w, err.(*sluice.Error).In("policy"))
		return
	}
	seconds, top, ok := 3600, 20, false
	if in.Seconds != nil {
		if seconds = *in.Seconds; seconds < 1 || seconds > 3600 {
			wire.WriteError(w, sluice.Invalid("seconds", "must be 1 to 3600, got %d", seconds))
			return
		}
	}
	if in.Top != nil {
		if top = *in.Top; top < 0 || top > 100 {
			wire.WriteError(w, sluice.Invalid("top", "must be 0 to 100, got %d", top))
			return
		}
	}
	var since time.Time
	if tenant != "" {
		if since, ok = h.insightSince(w, r, tenant); !ok {
			return
		}
	}
	tried, ok := h.opts.Insight.Try(&p, tenant, since, seconds, top)
	if !ok {
		wire.WriteError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: fmt.Sprintf("no sampled traffic of a policy named %q on this node", p.Name)})
		return
	}
	for i := range tried.Who {
		tried.Who[i].Key = h.tenants.KeyLabel(p.Name, tried.Who[i].Key)
	}
	wire.WriteJSON(w, http.StatusOK, tried)
}

// insightRange returns the seconds asked for, ending now.
func (h *Handler) insightRange(r *http.Request) (from, to int64, err error) {
	seconds := int64(60)
	if v := r.URL.Query().Get("seconds"); v != "" {
		if seconds, err = strconv.ParseInt(v, 10, 64); err != nil || seconds < 1 || seconds > 3600 {
			return 0, 0, sluice.Invalid("seconds", "must be 1 to 3600, got %q", v)
		}
	}
	to = h.opts.Now().Unix()
	return to - seconds + 1, to, nil
}

func insightN(r *http.Request) (int, error) {
	v := r.URL.Query().Get("n")
	if v == "" {
		return 20, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTop {
		return 0, sluice.Invalid("n", "must be 1 to %d, got %q", maxTop, v)
	}
	return n, nil
}

func (h *Handler) insightReady(w http.ResponseWriter) bool {
	if h.opts.Insight == nil {
		wire.WriteError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: "this server keeps no insight"})
		return false
	}
	return true
}

// insightOut is the admin's view of the counts: every tenant's and
// policy's, the store's latencies, and the nodes summed.
type insightOut struct {
	Kinds []string `json:"kinds"`
	// Refused and Admitted name the kinds that refused a request (the
	// dashboard's "denied": insight.Refused) and those that admitted it.
	Refused  []string               `json:"refused"`
	Admitted []string               `json:"admitted"`
	Tenants  []insight.NamedPoints  `json:"tenants,omitempty"`
	Tenant   *insight.NamedPoints   `json:"tenant,omitempty"`
	Policies []insight.NamedPoints  `json:"policies,omitempty"`
	Store    []insight.LatencyPoint `json:"store,omitempty"`
	Nodes    []string               `json:"nodes,omitempty"` // the admin's alone
	Missing  []string               `json:"missing,omitempty"`
}

func (h *Handler) insightAll(w http.ResponseWriter, r *http.Request) {
	from, to, ok := h.insightWindow(w, r)
	if !ok {
		return
	}
	out := insightOut{Kinds: insight.KindNames(), Refused: insight.RefusedKinds(), Admitted: insight.AdmittedKinds(), Tenants: []insight.NamedPoints{}, Policies: []insight.NamedPoints{}, Store: h.opts.Insight.StoreLatency(from, to)}
	for _, t := range sorted(h.opts.Insight.Tenants()) {
		out.Tenants = append(out.Tenants, insight.NamedPoints{Name: t, Points: h.opts.Insight.Tenant(t, from, to)})
	}
	for _, p := range sorted(h.opts.Insight.Policies()) {
		out.Policies = append(out.Policies, insight.NamedPoints{Name: p, Points: h.opts.Insight.Policy(p, from, to)})
	}
	g := h.opts.Cluster.GatherFor(r, insightPath(r, from, to))
	for _, o := range peer.DecodeEach[insightOut](g.Bodies, h.log) {
		out.Tenants = insight.SumNamed(out.Tenants, o.Tenants)
		out.Policies = insight.SumNamed(out.Policies, o.Policies)
		out.Store = insight.SumLatency(out.Store, o.Store)
	}
	out.Nodes, out.Missing = g.Nodes, g.Missing
	shape := h.pointsFor(r, g, from, to)
	for _, ss := range [][]insight.NamedPoints{out.Tenants, out.Policies} {
		for i := range ss {
			ss[i].Points = shape(ss[i].Points)
		}
	}
	if !peer.Forwarded(r) {
		// A client's: the buckets are for summing nodes.
		for i := range out.Store {
			out.Store[i].Buckets = nil
		}
	} else {
		out.Store = slices.DeleteFunc(out.Store, func(p insight.LatencyPoint) bool { return p.N == 0 })
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) insightTenant(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string) {
	from, to, ok := h.insightWindow(w, r)
	if !ok {
		return
	}
	since, ok := h.insightSince(w, r, tenant)
	if !ok {
		return
	}
	one := insight.NamedPoints{Name: tenant, Points: h.tenantPoints(tenant, since, from, to)}
	g := h.opts.Cluster.GatherFor(r, insightPath(r, from, to))
	for _, o := range peer.DecodeEach[insightOut](g.Bodies, h.log) {
		if o.Tenant != nil && o.Tenant.Name == tenant {
			one.Points = insight.SumPoints(one.Points, o.Tenant.Points)
		}
	}
	one.Points = h.pointsFor(r, g, from, to)(one.Points)
	out := insightOut{Kinds: insight.KindNames(), Refused: insight.RefusedKinds(), Admitted: insight.AdmittedKinds(), Tenant: &one}
	if who.Admin {
		out.Nodes, out.Missing = g.Nodes, g.Missing
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

// tenantPoints returns tenant's seconds from from to to, zeros before
// since (its creation: those of an earlier tenant of the same id).
func (h *Handler) tenantPoints(tenant string, since time.Time, from, to int64) []insight.Point {
	pts := h.opts.Insight.Tenant(tenant, from, to)
	for i := range pts {
		if pts[i].Second < since.Unix() {
			clear(pts[i].Counts)
		}
	}
	return pts
}

// insightWindow returns the seconds a counts route asks for, or answers
// the error: no insight kept, or a bad range.
func (h *Handler) insightWindow(w http.ResponseWriter, r *http.Request) (from, to int64, ok bool) {
	if !h.insightReady(w) {
		return 0, 0, false
	}
	from, to, err := h.insightRange(r)
	if err != nil {
		wire.WriteError(w, err)
		return 0, 0, false
	}
	return from, to, true
}

// insightPath is r's route for the same seconds, to ask the other nodes.
func insightPath(r *http.Request, from, to int64) string {
	return r.URL.Path + "?seconds=" + strconv.FormatInt(to-from+1, 10)
}

// pointsFor returns how a counts route's series leave: a peer gets the
// seconds with counts only (an hour by tenant and policy is mostly zeros);
// a client every second, when peers' sparse series were summed in.
func (h *Handler) pointsFor(r *http.Request, g peer.Gathered, from, to int64) func([]insight.Point) []insight.Point {
	switch {
	case peer.Forwarded(r):
		return sparse
	case len(g.Bodies) > 0:
		return func(pts []insight.Point) []insight.Point { return dense(pts, from, to) }
	}
	return func(pts []insight.Point) []insight.Point { return pts }
}

// dense returns pts with a point for every second from from to to, zero
// where pts has none, and none outside.
func dense(pts []insight.Point, from, to int64) []insight.Point {
	out := make([]insight.Point, 0, to-from+1)
	i := 0
	for sec := from; sec <= to; sec++ {
		for i < len(pts) && pts[i].Second < sec {
			i++
		}
		if i < len(pts) && pts[i].Second == sec {
			out = append(out, pts[i])
			continue
		}
		out = append(out, insight.Point{Second: sec, Counts: make([]int32, insight.Kinds)})
	}
	return out
}

// sparse drops the seconds without a count, in place.
func sparse(pts []insight.Point) []insight.Point {
	return slices.DeleteFunc(pts, func(p insight.Point) bool {
		return !slices.ContainsFunc(p.Counts, func(n int32) bool { return n != 0 })
	})
}

func (h *Handler) insightTop(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string) {
	if !h.insightReady(w) {
		return
	}
	var since time.Time
	if tenant != "" {
		var ok bool
		if since, ok = h.insightSince(w, r, tenant); !ok {
			return
		}
	}
	policy := r.URL.Query().Get("policy")
	if !sluice.ValidPolicyName(policy) {
		wire.WriteError(w, sluice.Invalid("policy", "must name a policy, got %q", policy))
		return
	}
	n, err := insightN(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	withState := false
	if v := r.URL.Query().Get("state"); v != "" {
		if withState, err = strconv.ParseBool(v); err != nil {
			wire.WriteError(w, sluice.Invalid("state", "must be true or false, got %q", v))
			return
		}
	}
	// Each node's lists are cut at maxTop, not n, so that a key heavy
	// over the cluster but not on one node is still summed.
	tops := []insight.Top{h.opts.Insight.TopKeys(policy, tenant, since, maxTop)}
	g := h.opts.Cluster.GatherFor(r, r.URL.Path+"?policy="+url.QueryEscape(policy)+"&n="+strconv.Itoa(maxTop))
	tops = append(tops, peer.DecodeEach[insight.Top](g.Bodies, h.log)...)
	top := insight.SumTop(tops, n)
	out := topJSON{Policy: policy}
	if who.Admin {
		out.HitsBound, out.DenialsBound = &top.HitsBound, &top.DenialsBound
		out.Nodes, out.Missing = g.Nodes, g.Missing
	} else {
		// A shared sketch's errors and bounds come of every tenant's
		// traffic: a tenant sees what its keys were counted since they
		// came in, at least their weight.
		for _, ks := range [][]insight.KeyCount{top.Hits, top.Denials} {
			for i := range ks {
				ks[i].Count, ks[i].Err = ks[i].Count-ks[i].Err, 0
			}
		}
	}
	var states *stateCache
	if withState {
		states = &stateCache{keys: map[string]*keyState{}, tenants: map[string]resolvedTenant{}}
	}
	out.Hits = h.keysOut(r, policy, top.Hits, states)
	out.Denials = h.keysOut(r, policy, top.Denials, states)
	wire.WriteJSON(w, http.StatusOK, out)
}

// topJSON is a policy's heaviest keys on the wire: each with a readable
// label and, if asked, its state now.
type topJSON struct {
	Policy       string       `json:"policy"`
	Hits         []topKeyJSON `json:"hits"`
	HitsBound    *int64       `json:"hitsBound,omitempty"` // the admin's alone, as Nodes
	Denials      []topKeyJSON `json:"denials"`
	DenialsBound *int64       `json:"denialsBound,omitempty"`
	Nodes        []string     `json:"nodes,omitempty"`
	Missing      []string     `json:"missing,omitempty"`
}

// maxTop is the most keys a top lists (n).
const maxTop = 100

type topKeyJSON struct {
	insight.KeyCount
	Key   string `json:"key"` // readable ("user=bot-7"), as in label
	Label string `json:"label"`
	*keyState
}

// keyState is a key's state now: its counter read without deciding, the
// end of its penalty box's block and of the operator's block.
type keyState struct {
	State        *counterState `json:"state,omitempty"`
	PenaltyUntil *time.Time    `json:"penaltyUntil,omitempty"`
	BlockedUntil *time.Time    `json:"blockedUntil,omitempty"`
}

// keysOut labels keys and, with states, reads each one's state: a read of
// its counter and box per key (at most 2n), each tenant's record once.
func (h *Handler) keysOut(r *http.Request, policy string, keys []insight.KeyCount, states *stateCache) []topKeyJSON {
	out := make([]topKeyJSON, 0, len(keys))
	kk, canRead := h.opts.States, h.opts.States != nil
	configured := h.tenants.Configured(policy)
	for _, k := range keys {
		label := h.tenants.KeyLabel(policy, k.Key)
		j := topKeyJSON{KeyCount: k, Key: label, Label: label}
		if states != nil && canRead && configured {
			j.keyState = h.stateOf(r, kk, states, policy, k.Tenant, k.Key)
		}
		out = append(out, j)
	}
	return out
}

// stateCache holds a listing's key states and tenants, each read once.
type stateCache struct {
	keys    map[string]*keyState
	tenants map[string]resolvedTenant
}

// stateOf returns a key's state, read once a listing; nil if it cannot be
// read.
func (h *Handler) stateOf(r *http.Request, kk StateReader, c *stateCache, policy, tenant, key string) *keyState {
	id := tenant + "\x00" + key
	if st, ok := c.keys[id]; ok {
		return st
	}
	rt, ok := c.tenants[tenant]
	if !ok {
		t, storeErr := h.tenants.View(r.Context(), tenant)
		rs, err := t.Resolve("", []string{policy})
		rt = resolvedTenant{t: t, ok: err == nil && storeErr == nil}
		if rt.ok {
			rt.p = rs[0].Policy
		}
		c.tenants[tenant] = rt
	}
	var st *keyState
	if rt.ok {
		st = h.keyStateOf(r, kk, rt, tenant, key)
	}
	c.keys[id] = st
	return st
}

// counterState is a counter read without deciding.
type counterState struct {
	Limit     int64     `json:"limit"`
	Remaining int64     `json:"remaining"`
	Allowed   bool      `json:"allowed"`
	ResetAt   time.Time `json:"resetAt"`
}

// resolvedTenant is a tenant's record and its resolved policy, read once
// per listing.
type resolvedTenant struct {
	t  tenancy.Tenant
	p  sluice.Policy
	ok bool
}

func (h *Handler) keyStateOf(r *http.Request, kk StateReader, rt resolvedTenant, tenant, key string) *keyState {
	counter, box, err := kk.State(r.Context(), tenant, sluice.Check{Policy: rt.p, Key: key, Epoch: rt.t.Epoch()})
	if err != nil {
		return nil
	}
	st := &keyState{}
	st.State = &counterState{counter.Limit, counter.Remaining, counter.Allowed, counter.ResetAt.UTC()}
	if !box.Allowed && box.RetryAfter > 0 {
		until := h.opts.Now().Add(box.RetryAfter).UTC()
		st.PenaltyUntil = &until
	}
	if until := rt.t.BlockedUntil(rt.p.Name, key, h.opts.Now()); !until.IsZero() {
		until = until.UTC()
		st.BlockedUntil = &until
	}
	return st
}

// insightGateway: GET /v1/insight/gateway, the gateway's live counts on
// this node and its refusals since the start.
func (h *Handler) insightGateway(w http.ResponseWriter, r *http.Request) {
	if h.opts.GatewayStats == nil {
		wire.WriteError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: "this server runs no WebSocket gateway"})
		return
	}
	st := h.opts.GatewayStats()
	refused := map[string]int64{}
	if h.opts.GatewayRefusals != nil {
		refused = h.opts.GatewayRefusals()
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{
		"connections": st.Connections, "sessions": st.Sessions, "silos": st.Silos,
		"siloDepth": st.SiloDepth, "pooledDepth": st.PooledDepth, "refused": refused,
	})
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// insightStream streams, every second, the last whole second's counts as
// Server-Sent Events (event "second", data a JSON Point per series) until
// the client goes, its key or tenant goes (event "end", data the reason),
// or the server shuts down: the admin's every tenant's, a tenant's its
// own. Streams are bounded and re-checked (streams.go).
func (h *Handler) insightStream(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string, all bool) {
	if !h.insightReady(w) {
		return
	}
	var since time.Time
	if !all {
		var err error
		if since, err = h.tenantSince(r.Context(), tenant); err != nil {
			wire.WriteError(w, err)
			return
		}
	}
	leave, ok := h.hub.enter(tenant, who.Admin)
	if !ok {
		what := "the most"
		if !who.Admin {
			what = "its tenant's most"
		}
		refuseStream(w, what)
		return
	}
	defer leave()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // held open: the server's write timeout is for ordinary requests
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := h.hub.next()
	sec := h.opts.Now().Unix() - 1
	for {
		peers := h.hub.last()
		var out []insight.NamedPoints
		if all {
			for _, t := range sorted(h.opts.Insight.Tenants()) {
				out = append(out, insight.NamedPoints{Name: t, Points: h.opts.Insight.Tenant(t, sec, sec)})
			}
		} else {
			out = append(out, insight.NamedPoints{Name: tenant, Points: h.tenantPoints(tenant, since, sec, sec)})
		}
		if peers.sec == sec {
			out = addPeers(out, peers.tenants, all, sec)
		}
		if !writeEvent(w, rc, "second", out) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.streams:
			return
		case <-tick:
		}
		tick, sec = h.hub.next(), h.hub.last().sec
		if why := h.streamGone(r, tenant, all, since); why != "" {
			writeEvent(w, rc, "end", map[string]string{"reason": why})
			return
		}
	}
}

// addPeers adds the other nodes' counts of second sec to a stream's
// series: every tenant's for all, else the stream's one.
func addPeers(out []insight.NamedPoints, peers map[string]insight.Point, all bool, sec int64) []insight.NamedPoints {
	if all {
		theirs := make([]insight.NamedPoints, 0, len(peers))
		for t, p := range peers {
			theirs = append(theirs, insight.NamedPoints{Name: t, Points: []insight.Point{p}})
		}
		return insight.SumNamed(out, theirs)
	}
	if p, ok := peers[out[0].Name]; ok && p.Second == sec {
		out[0].Points = insight.SumPoints(out[0].Points, []insight.Point{p})
	}
	return out
}

// writeEvent writes one Server-Sent Event and flushes it; false if the
// client is gone.
func writeEvent(w http.ResponseWriter, rc *http.ResponseController, event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return false
	}
	return rc.Flush() == nil
}
