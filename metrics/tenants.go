package metrics

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// overflow is the tenant label of the tenants past the cap: no tenant id
// (sluice.ValidID) can be it, so that a tenant named "other" and the
// overflow stay apart, as insight.Other.
const overflow = "(other)"

// idleAfter is how long a labelled tenant keeps its place without a
// decision (to within sweepEvery): tenants that never existed, which an
// open server's callers may name, take places only for that long.
const idleAfter = time.Hour

// sweepEvery is how often at most the places are swept for idle ones; it
// is also how stale a place's time of use may be.
const sweepEvery = time.Minute

// tenantLabels gives tenants their own label value, the first max of them
// seen, and the rest overflow's, so that tenants cannot grow a label set.
// A deleted tenant's label is forgotten (forget), so that its series go
// and a tenant created again under its id starts as a new one; so is the
// label of a tenant idle for idleAfter, at the next sweep, which a scrape
// (sweep) or a tenant asking for a place runs. max 0 (the default) labels
// none: every tenant's label is "". It is safe for concurrent use; a
// tenant labelled already costs a read lock and a reading of the clock.
type tenantLabels struct {
	max  atomic.Int64
	mu   sync.RWMutex
	seen map[string]*place
	// swept is when the places were last swept.
	swept time.Time
	// drop deletes the series of a tenant whose place a sweep freed; it
	// is called with mu held, and must not label.
	drop func(tenant string)
}

// place is a labelled tenant's: when it was last used, in Unix seconds,
// updated at most once each sweepEvery.
type place struct{ used atomic.Int64 }

// use notes that p's tenant was labelled at now (Unix seconds).
func (p *place) use(now int64) {
	if now-p.used.Load() >= int64(sweepEvery/time.Second) {
		p.used.Store(now)
	}
}

// setMax labels the first n tenants seen from now on.
func (l *tenantLabels) setMax(n int) { l.max.Store(int64(n)) }

// label is t's label: "" unless labels are on; its own once it was seen
// with add set while fewer than the cap had one; overflow otherwise.
func (l *tenantLabels) label(t string, add bool) string {
	max := l.max.Load()
	if max == 0 {
		return ""
	}
	l.mu.RLock()
	p := l.seen[t]
	l.mu.RUnlock()
	if p != nil {
		p.use(time.Now().Unix())
		return t
	}
	if !add {
		return overflow
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.seen[t]; p != nil {
		p.use(now.Unix())
		return t
	}
	if int64(len(l.seen)) >= max {
		l.sweepLocked(now)
	}
	if int64(len(l.seen)) >= max {
		return overflow
	}
	if l.seen == nil {
		l.seen = map[string]*place{}
	}
	p = new(place)
	p.used.Store(now.Unix())
	l.seen[t] = p
	return t
}

// sweep frees the places idle for idleAfter, unless they were swept less
// than sweepEvery ago.
func (l *tenantLabels) sweep() {
	if l.max.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(time.Now())
}

func (l *tenantLabels) sweepLocked(now time.Time) {
	if now.Sub(l.swept) < sweepEvery {
		return
	}
	l.swept = now
	idle := now.Add(-idleAfter).Unix()
	for t, p := range l.seen {
		if p.used.Load() <= idle {
			delete(l.seen, t)
			if l.drop != nil {
				l.drop(t)
			}
		}
	}
}

// forget drops t's label, if it has one, freeing its place: it reports
// whether it had one, whose series the caller deletes.
func (l *tenantLabels) forget(t string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, had := l.seen[t]
	delete(l.seen, t)
	return had
}

// errNoKey answers a request to a handler behind RequireKey without the key.
var errNoKey = &sluice.Error{Kind: sluice.KindUnauthorized, Message: "/metrics names tenants: send Authorization: Bearer <admin key>"}

// RequireKey serves h only to requests bearing key (Authorization: Bearer
// key), answering others 401; an empty key serves h to any. It guards
// /metrics when its tenant labels name tenants and their traffic, which
// no tenant may read of another.
func RequireKey(h http.Handler, key string) http.Handler {
	if key == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(key)) != 1 {
			wire.WriteError(w, errNoKey)
			return
		}
		h.ServeHTTP(w, r)
	})
}
