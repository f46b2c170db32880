package insighthttp

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// The history routes: the counts per minute, further back than the hour
// of seconds and across restarts (insight.HistoryOptions).
//
//	GET /v1/insight/history?minutes=M               the admin's: every tenant's and policy's, and the top tenants by denials
//	GET /v1/tenants/{id}/insight/history?minutes=M  a tenant's own
//
// minutes is 1 to the history's span (default 60). Each point is a minute
// (t its first second) with a count, the minute in progress included;
// minutes without one are left out. Mount routes them.
// historyOut is a history answer.
type historyOut struct {
	Kinds    []string              `json:"kinds"`
	Refused  []string              `json:"refused"`
	Admitted []string              `json:"admitted"`
	Step     int                   `json:"step"`    // seconds a point counts: 60
	Minutes  int                   `json:"minutes"` // the minutes asked for
	Span     int                   `json:"span"`    // the minutes the history keeps
	Kept     string                `json:"kept"`    // "file": across restarts; "memory": until the process ends
	Tenants  []insight.NamedPoints `json:"tenants,omitempty"`
	Tenant   *insight.NamedPoints  `json:"tenant,omitempty"`
	Policies []insight.NamedPoints `json:"policies,omitempty"`
	// TopTenants are the tenants with the most denials (every refusal)
	// over the minutes, then the most decisions: the admin's alone.
	TopTenants []tenantTotal `json:"topTenants,omitempty"`
	Nodes      []string      `json:"nodes,omitempty"`
	Missing    []string      `json:"missing,omitempty"`
}

// tenantTotal is a tenant's decisions over a history's minutes.
type tenantTotal struct {
	Tenant    string `json:"tenant"`
	Denied    int64  `json:"denied"`
	Decisions int64  `json:"decisions"`
}

// maxTopTenants is how many tenants a history's top lists.
const maxTopTenants = 20

func (h *Handler) historyWindow(w http.ResponseWriter, r *http.Request) (out historyOut, from, to int64, ok bool) {
	if !h.insightReady(w) {
		return out, 0, 0, false
	}
	span, kept := h.opts.Insight.HistorySpan()
	minutes := 60
	if v := r.URL.Query().Get("minutes"); v != "" {
		var err error
		if minutes, err = strconv.Atoi(v); err != nil || minutes < 1 || minutes > span {
			wire.WriteError(w, sluice.Invalid("minutes", "must be 1 to %d, got %q", span, v))
			return out, 0, 0, false
		}
	}
	out = historyOut{Kinds: insight.KindNames(), Refused: insight.RefusedKinds(), Admitted: insight.AdmittedKinds(),
		Step: 60, Minutes: minutes, Span: span, Kept: "memory"}
	if kept {
		out.Kept = "file"
	}
	to = h.opts.Now().Unix() / 60
	return out, to - int64(minutes) + 1, to, true
}

func (h *Handler) historyAll(w http.ResponseWriter, r *http.Request) {
	out, from, to, ok := h.historyWindow(w, r)
	if !ok {
		return
	}
	rec := h.opts.Insight
	out.Tenants, out.Policies = []insight.NamedPoints{}, []insight.NamedPoints{}
	for _, t := range rec.HistoryLabels(false) {
		if pts := rec.Minutes(t, false, 0, from, to); len(pts) > 0 {
			out.Tenants = append(out.Tenants, insight.NamedPoints{Name: t, Points: pts})
		}
	}
	for _, p := range rec.HistoryLabels(true) {
		if pts := rec.Minutes(p, true, 0, from, to); len(pts) > 0 {
			out.Policies = append(out.Policies, insight.NamedPoints{Name: p, Points: pts})
		}
	}
	g := h.opts.Cluster.GatherFor(r, historyPath(r, out.Minutes))
	for _, o := range peer.DecodeEach[historyOut](g.Bodies, h.log) {
		out.Tenants = insight.SumNamed(out.Tenants, o.Tenants)
		out.Policies = insight.SumNamed(out.Policies, o.Policies)
	}
	out.Nodes, out.Missing = g.Nodes, g.Missing
	if !peer.Forwarded(r) {
		out.TopTenants = topTenants(out.Tenants, maxTopTenants)
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) historyTenant(w http.ResponseWriter, r *http.Request, who tenancy.Principal, tenant string) {
	out, from, to, ok := h.historyWindow(w, r)
	if !ok {
		return
	}
	since, ok := h.insightSince(w, r, tenant)
	if !ok {
		return
	}
	// What was counted before the tenant was created is an earlier
	// tenant's of the same id: each node leaves it out (Minutes).
	one := insight.NamedPoints{Name: tenant, Points: h.opts.Insight.Minutes(tenant, false, since.Unix(), from, to)}
	g := h.opts.Cluster.GatherFor(r, historyPath(r, out.Minutes))
	for _, o := range peer.DecodeEach[historyOut](g.Bodies, h.log) {
		if o.Tenant != nil && o.Tenant.Name == tenant {
			one.Points = insight.SumPoints(one.Points, o.Tenant.Points)
		}
	}
	if one.Points == nil {
		one.Points = []insight.Point{}
	}
	out.Tenant = &one
	if who.Admin {
		out.Nodes, out.Missing = g.Nodes, g.Missing
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func historyPath(r *http.Request, minutes int) string {
	return r.URL.Path + "?minutes=" + strconv.Itoa(minutes)
}

// topTenants ranks tenants by their denials over their points, then by
// their decisions, and keeps n. Other (the tenants past the bound) is
// not a tenant, and is left out.
func topTenants(series []insight.NamedPoints, n int) []tenantTotal {
	out := []tenantTotal{}
	for _, s := range series {
		if s.Name == insight.Other {
			continue
		}
		t := tenantTotal{Tenant: s.Name}
		for _, p := range s.Points {
			for k, c := range p.Counts {
				t.Decisions += int64(c)
				if insight.Refused(engine.Outcome(k)) {
					t.Denied += int64(c)
				}
			}
		}
		if t.Decisions > 0 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b tenantTotal) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.Decisions, a.Decisions), cmp.Compare(a.Tenant, b.Tenant))
	})
	return out[:min(len(out), n)]
}
