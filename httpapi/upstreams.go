package httpapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/forward"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// Upstream is a configured upstream quota and the scheduler that shares it,
// with what of its configuration the scheduler does not hold: as the
// server started, until a restart.
type Upstream struct {
	Quota *fairshare.Upstream
	// MaxWait is a request's wait when it names none, and the most it may
	// name.
	MaxWait time.Duration
	Weights tenancy.Weights
	// Margin is what the scheduler's window is longer than the upstream's
	// (Quota's window is the upstream's plus Margin), for jitter between a
	// grant and its call's arrival.
	Margin time.Duration
	// Proxy, if not nil, sends calls to the upstream for its customers
	// (ANY /v1/upstreams/{name}/proxy/{path...}); its owner closes it.
	Proxy *forward.Forwarder
}

// maxShownQueues bounds the customer queues an upstream's state lists.
const maxShownQueues = 100

// acquireUpstream: POST /v1/upstreams/{name}/acquire. The request is held
// until it is granted (200), refused (429), or its client goes, which
// withdraws its place.
func (h *Handler) acquireUpstream(w http.ResponseWriter, r *http.Request, who principal) {
	name := r.PathValue("name")
	up, ok := h.opts.Upstreams[name]
	if !ok {
		writeError(w, errNoUpstream(name))
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in wire.AcquireRequest
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		writeError(w, err)
		return
	}
	tenant, err := who.TenantOf(in.Tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	cost, maxWait := int64(1), up.MaxWait
	if in.Cost != nil {
		cost = *in.Cost
	}
	if in.MaxWait != nil {
		maxWait = in.MaxWait.D
	}
	c := call{tenant: tenant, key: in.Key, cost: cost, maxWait: maxWait, maxWaitErr: in.MaxWait.Err()}
	if err := c.check(up, acquireFields); err != nil {
		writeError(w, err)
		return
	}
	if g, ok := h.grant(w, r, name, up, c, 0); ok {
		writeJSON(w, http.StatusOK, wire.FromGrant(g.At, g.Waited))
	}
}

// call is a request for an upstream's units: its customer (a tenant and a
// key), its cost and its longest wait, as a route decodes them.
type call struct {
	tenant, key string
	cost        int64
	maxWait     time.Duration
	maxWaitErr  error // the wait as given could not be read
}

// callFields name call's fields in a route's errors: tenant, key, cost and
// maxWait, in that order.
type callFields [4]string

var acquireFields = callFields{"tenant", "key", "cost", "maxWait"}

// check refuses a call the upstream cannot take, naming the field.
func (c call) check(up Upstream, f callFields) error {
	qc := up.Quota.Config()
	switch {
	case !sluice.ValidID(c.tenant):
		return sluice.Invalid(f[0], "must be a valid tenant id, got %q", c.tenant)
	case c.key == "" || len(c.key) > sluice.MaxKeyLen:
		return sluice.Invalid(f[1], "must be 1 to %d bytes: the customer within the tenant", sluice.MaxKeyLen)
	case c.cost < 1 || c.cost > qc.Burst:
		return sluice.Invalid(f[2], "must be between 1 and the upstream's burst %d, got %d", qc.Burst, c.cost)
	case qc.Cap > 0 && c.cost > qc.Cap:
		return sluice.Invalid(f[2], "must be at most the upstream's cap %d per customer, got %d", qc.Cap, c.cost)
	case c.maxWaitErr != nil:
		return sluice.Invalid(f[3], "%v", c.maxWaitErr)
	case c.maxWait < time.Millisecond || c.maxWait > up.MaxWait:
		return sluice.Invalid(f[3], "must be between 1ms and the upstream's maxWait %v, got %v", up.MaxWait, c.maxWait)
	}
	return nil
}

// grant waits for c's turn at upstream name: ok, or its refusal answered
// (429 as acquire answers it), or its client gone. The request is held for
// up to c's maxWait, then for after more: the server's write deadline is
// stretched past both.
func (h *Handler) grant(w http.ResponseWriter, r *http.Request, name string, up Upstream, c call, after time.Duration) (fairshare.Grant, bool) {
	weight := h.tenants.UpstreamWeight(r.Context(), up.Weights, c.tenant)
	cust := customerOf(c.tenant, h.tenants.HideKey(c.tenant, c.key))
	// The server's write timeout is for ordinary requests. Not every
	// writer can say (httptest's recorder): then the server's timeout
	// stands.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(c.maxWait + after + 10*time.Second))
	g, err := up.Quota.AcquireGrant(r.Context(), cust, c.tenant, weight, c.cost, c.maxWait)
	if err != nil {
		if r.Context().Err() == nil { // else the client went: its place is withdrawn, and no one reads an answer
			wire.WriteAcquireError(w, name, err, up.Quota.Estimate(cust, c.tenant, weight, c.cost))
		}
		return fairshare.Grant{}, false
	}
	return g, true
}

func errNoUpstream(name string) error {
	return &sluice.Error{Kind: sluice.KindNotFound, Field: "name", Message: fmt.Sprintf("upstream %q is not configured", name)}
}

// customerOf names tenant's customer key: the tenant length-prefixed, so
// that no two (tenant, key) pairs share a queue.
func customerOf(tenant, key string) fairshare.Customer {
	b := binary.AppendUvarint(make([]byte, 0, 2+len(tenant)+len(key)), uint64(len(tenant)))
	return fairshare.Customer(append(append(b, tenant...), key...))
}

// splitCustomer is customerOf's inverse.
func splitCustomer(c fairshare.Customer) (tenant, key string) {
	n, w := binary.Uvarint([]byte(c))
	if w <= 0 || uint64(len(c)-w) < n {
		return "", string(c)
	}
	return string(c[w : w+int(n)]), string(c[w+int(n):])
}

// upstreamOut is an upstream's configuration and live state.
type upstreamOut struct {
	Name     string        `json:"name"`
	Rate     int64         `json:"rate"`
	Window   string        `json:"window"`
	Margin   string        `json:"margin,omitempty"`
	Burst    int64         `json:"burst"`
	MaxQueue int           `json:"maxQueue"`
	Cap      int64         `json:"cap,omitempty"`
	MaxWait  string        `json:"maxWait"`
	Weights  weightsOut    `json:"weights"`
	State    upstreamState `json:"state"`
	Queues   []customerOut `json:"queues"`
	Proxy    *proxyOut     `json:"proxy,omitempty"`
}

// proxyOut is the state of an upstream's proxy: its calls in flight on
// this node, and the tenants they are of.
type proxyOut struct {
	InFlight int `json:"inFlight"`
	Tenants  int `json:"tenants"`
}

type weightsOut struct {
	Tiers   map[string]int64 `json:"tiers"`
	Tenants map[string]int64 `json:"tenants"`
}

type upstreamState struct {
	Waiting     int     `json:"waiting"`
	Customers   int     `json:"customers"`
	Granted     int64   `json:"granted"`
	Utilisation float64 `json:"utilisation"`
	// Share is this node's part of the rate, Nodes the nodes sharing it,
	// FairLevel the rate per unit of weight of the customers asking more
	// than it; absent when every customer gets all it asks.
	Share     float64 `json:"share"`
	Nodes     int     `json:"nodes"`
	FairLevel float64 `json:"fairLevel,omitempty"`
}

type customerOut struct {
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	Weight  int64  `json:"weight"`
	Waiting int    `json:"waiting"`
	Backlog int64  `json:"backlog"`
}

func upstreamInfo(name string, up Upstream) upstreamOut {
	qc := up.Quota.Config()
	st := up.Quota.Stats(maxShownQueues)
	out := upstreamOut{
		Name: name, Rate: qc.Rate, Window: (qc.Window - up.Margin).String(), Burst: qc.Burst, MaxQueue: qc.MaxQueue, Cap: qc.Cap, MaxWait: up.MaxWait.String(),
		Weights: weightsOut{Tiers: orEmpty(up.Weights.Tiers), Tenants: orEmpty(up.Weights.Tenants)},
		State: upstreamState{Waiting: st.Waiting, Customers: st.Customers, Granted: st.Granted, Utilisation: st.Utilisation,
			Share: st.Share, Nodes: st.Nodes},
		Queues: make([]customerOut, len(st.Queues)),
	}
	if up.Margin > 0 {
		out.Margin = up.Margin.String()
	}
	if up.Proxy != nil {
		out.Proxy = &proxyOut{}
		out.Proxy.InFlight, out.Proxy.Tenants = up.Proxy.InFlight()
	}
	if !math.IsInf(st.Level, 0) {
		out.State.FairLevel = st.Level
	}
	for i, q := range st.Queues {
		tenant, key := splitCustomer(q.Customer)
		out.Queues[i] = customerOut{Tenant: tenant, Key: key, Weight: q.Weight, Waiting: q.Waiting, Backlog: q.Backlog}
	}
	return out
}

func orEmpty(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

// listUpstreams: GET /v1/upstreams, the admin's.
func (h *Handler) listUpstreams(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.Admin {
		writeError(w, tenancy.ErrAdminOnly)
		return
	}
	out := []upstreamOut{}
	for _, name := range sortedKeys(h.opts.Upstreams) {
		out = append(out, upstreamInfo(name, h.opts.Upstreams[name]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"upstreams": out})
}

// getUpstream: GET /v1/upstreams/{name}, the admin's.
func (h *Handler) getUpstream(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.Admin {
		writeError(w, tenancy.ErrAdminOnly)
		return
	}
	name := r.PathValue("name")
	up, ok := h.opts.Upstreams[name]
	if !ok {
		writeError(w, errNoUpstream(name))
		return
	}
	writeJSON(w, http.StatusOK, upstreamInfo(name, up))
}

func sortedKeys(m map[string]Upstream) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
