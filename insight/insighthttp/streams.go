package insighthttp

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/wire"
)

// The insight streams (GET /v1/insight/stream, /v1/tenants/{id}/insight/
// stream) are requests held open, so each is bounded, re-checked and
// cheap to the other nodes:
//
//   - A node holds at most MaxStreams of them, and a tenant's keys at most
//     MaxTenantStreams; past either a stream is refused 429 with
//     Retry-After.
//   - Every second the stream's key is authenticated again and its
//     tenant's creation time read again: a stream whose key was deleted,
//     or whose tenant was deleted (and perhaps created again for somebody
//     else), ends with an event "end".
//   - One poller asks the other nodes for their last second once a
//     second, however many streams are open, and every stream reads its
//     counts from that.
const (
	defaultMaxStreams       = 256
	defaultMaxTenantStreams = 4
	// streamRetry is the Retry-After of a stream refused for the caps.
	streamRetry = 5 * time.Second
	// streamPollTimeout bounds the poller's ask of the other nodes, so
	// that a slow node holds the streams' second for less than a second.
	streamPollTimeout = 900 * time.Millisecond
)

// streamHub counts a node's open streams, per tenant, and runs the poller
// of the other nodes while any is open.
type streamHub struct {
	h                 *Handler
	max, maxPerTenant int

	mu       sync.Mutex
	open     int
	byTenant map[string]int // a tenant key's streams
	running  bool           // the poller runs
	tick     chan struct{}  // closed when snap is a new second's
	snap     peerSecond
}

// peerSecond is the other nodes' counts of one second, by tenant.
type peerSecond struct {
	sec     int64
	tenants map[string]insight.Point
}

func newStreamHub(h *Handler, max, perTenant int) *streamHub {
	if max <= 0 {
		max = defaultMaxStreams
	}
	if perTenant <= 0 {
		perTenant = defaultMaxTenantStreams
	}
	return &streamHub{h: h, max: max, maxPerTenant: perTenant, byTenant: map[string]int{}, tick: make(chan struct{})}
}

// enter counts a new stream of tenant (a tenant key's, unless byAdmin),
// starting the poller if it is the first; ok is false past the caps.
// leave undoes it.
func (s *streamHub) enter(tenant string, byAdmin bool) (leave func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.max || !byAdmin && s.byTenant[tenant] >= s.maxPerTenant {
		return nil, false
	}
	s.open++
	if !byAdmin {
		s.byTenant[tenant]++
	}
	if !s.running {
		s.running = true
		go s.poll()
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.open--
		if !byAdmin {
			if s.byTenant[tenant]--; s.byTenant[tenant] <= 0 {
				delete(s.byTenant, tenant)
			}
		}
	}, true
}

// next returns the channel closed at the next second's counts.
func (s *streamHub) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tick
}

// last returns the other nodes' latest second polled.
func (s *streamHub) last() peerSecond {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// poll asks the other nodes for their last whole second, once a second,
// until no stream is open or the streams are closed (CloseStreams).
func (s *streamHub) poll() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.h.streams:
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.open == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		sec := s.h.opts.Now().Unix() - 1
		snap := peerSecond{sec: sec, tenants: s.h.peersSecond(sec)}
		s.mu.Lock()
		s.snap = snap
		close(s.tick)
		s.tick = make(chan struct{})
		s.mu.Unlock()
	}
}

// peersSecond returns the other nodes' counts of second sec, by tenant,
// summed: one request to each.
func (h *Handler) peersSecond(sec int64) map[string]insight.Point {
	out := map[string]insight.Point{}
	g := h.opts.Cluster.Gather(context.Background(), "/v1/insight?seconds=3", streamPollTimeout)
	for _, o := range peer.DecodeEach[insightOut](g.Bodies, h.log) {
		for _, s := range o.Tenants {
			for _, p := range s.Points {
				if p.Second != sec {
					continue
				}
				if sum, ok := out[s.Name]; ok {
					p = insight.SumPoints([]insight.Point{sum}, []insight.Point{p})[0]
				}
				out[s.Name] = p
			}
		}
	}
	return out
}

// refuseStream answers a stream past the caps.
func refuseStream(w http.ResponseWriter, what string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(streamRetry/time.Second)))
	wire.WriteJSON(w, http.StatusTooManyRequests, wire.Error{Error: "too_many_streams",
		Message: "this node holds " + what + " insight streams already: close one, or retry later"})
}

// streamGone reports why a stream may go on no more, or "" if it may: its
// key must still reach tenant (or be the admin's, for all), and tenant
// must be the one of the stream's start (created at since).
func (h *Handler) streamGone(r *http.Request, tenant string, all bool, since time.Time) string {
	who, err := h.authenticate(r)
	switch {
	case err != nil && errKindUnavailable(err):
		return "" // the store is down: the key was good a second ago
	case err != nil:
		return "the stream's key is no longer valid"
	case all && !who.Admin, !all && !who.Can(tenant):
		return "the stream's key no longer reaches its tenant"
	case all:
		return ""
	}
	now, err := h.tenantSince(r.Context(), tenant)
	switch {
	case err != nil && errKindUnavailable(err):
		return ""
	case err != nil:
		return "the stream's tenant is gone"
	case !now.Equal(since):
		return "the stream's tenant was deleted and created again"
	}
	return ""
}
