package peer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// store is a shared store's list of nodes, in memory: what it lists, the
// announcements it got, and how often it was read.
type store struct {
	mu        sync.Mutex
	nodes     []string // live for an hour, each under its own tag
	runs      []sluice.Heartbeat
	err       error // of reads
	down      bool  // announcements fail
	reads     int
	announced []time.Time   // the untils
	hold      chan struct{} // if set, a read waits for it to close
}

func (s *store) Announce(_ context.Context, h sluice.Heartbeat) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("store down")
	}
	s.announced = append(s.announced, h.Until)
	i := slices.IndexFunc(s.runs, func(r sluice.Heartbeat) bool { return r.Node == h.Node && r.Tag == h.Tag })
	if i < 0 {
		s.runs = append(s.runs, h)
	} else {
		s.runs[i] = h
	}
	return nil
}

func (s *store) Heartbeats(context.Context) ([]sluice.Heartbeat, error) {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	out := slices.Clone(s.runs)
	for i, n := range s.nodes {
		out = append(out, sluice.Heartbeat{Node: n, Tag: uint16(1000 + i), Until: time.Now().Add(time.Hour)})
	}
	return out, s.err
}

// TestGatherNamesTheNodesThatDidNotAnswer: a gather asks every other
// node at once, with the admin key and marked forwarded; a node that
// answers in time is counted, one that does not answer within the
// timeout, or answers an error, is named missing (and logged), and the
// gather takes the timeout, not the slow node's time. A request that is
// itself forwarded gathers this node alone, as does a cluster without a
// store, a store that fails, or none at all.
func TestGatherNamesTheNodesThatDidNotAnswer(t *testing.T) {
	var asked atomic.Int64
	answers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if !Forwarded(r) || r.Header.Get("Authorization") != "Bearer k" || r.URL.Path != "/v1/insight" || r.URL.RawQuery != "seconds=3" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"n":2}`))
	}))
	defer answers.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the asker gave up
	}))
	defer slow.Close()
	fails := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unavailable","message":"the store is unavailable; try again"}`, http.StatusServiceUnavailable)
	}))
	defer fails.Close()

	client := NewClient("k")
	defer client.client.CloseIdleConnections()
	st := &store{nodes: []string{answers.URL, "http://self", slow.URL, fails.URL}}
	var buf bytes.Buffer // written by the handler, which serialises the gather's goroutines
	log := slog.New(slog.NewTextHandler(&buf, nil))
	c := NewCluster("http://self", st, client, log)

	start := time.Now()
	g := c.Gather(context.Background(), "/v1/insight?seconds=3", 300*time.Millisecond)
	took := time.Since(start)
	if !slices.Equal(g.Nodes, []string{"http://self", answers.URL}) || !slices.Equal(g.Missing, []string{slow.URL, fails.URL}) || len(g.Bodies) != 1 {
		t.Fatalf("gathered nodes %q, missing %q, %d bodies; want this node and the one that answered, the slow and the failing missing", g.Nodes, g.Missing, len(g.Bodies))
	}
	if took < 300*time.Millisecond || took > patience {
		t.Errorf("the gather took %v: want the timeout, 300ms, waited for the slow node and no more", took)
	}
	if got := DecodeEach[struct{ N int }](append(g.Bodies, []byte("not JSON")), log); len(got) != 1 || got[0].N != 2 {
		t.Errorf("DecodeEach = %+v, want the one answer, the other skipped", got)
	}
	for _, want := range []string{"node=" + slow.URL, "node=" + fails.URL, "not understood"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, &buf)
		}
	}

	// A request that another node forwarded is answered by this node
	// alone; a client's asks the others.
	asked.Store(0)
	c = NewCluster("http://self", &store{nodes: []string{answers.URL}}, client, nil)
	r := httptest.NewRequest("GET", "/v1/insight?seconds=3", nil)
	r.Header.Set(ForwardedHeader, "1")
	if g := c.GatherFor(r, "/v1/insight?seconds=3"); !slices.Equal(g.Nodes, []string{"http://self"}) || g.Missing != nil || asked.Load() != 0 {
		t.Errorf("a forwarded request gathered %q, missing %q, asking %d nodes; want this node alone", g.Nodes, g.Missing, asked.Load())
	}
	r.Header.Del(ForwardedHeader)
	if g := c.GatherFor(r, "/v1/insight?seconds=3"); len(g.Bodies) != 1 || asked.Load() != 1 {
		t.Errorf("a client's request gathered %d bodies, asking %d nodes; want the other nodes asked", len(g.Bodies), asked.Load())
	}

	for name, c := range map[string]*Cluster{
		"no store":     NewCluster("http://self", nil, client, nil),
		"store failed": NewCluster("http://self", &store{err: errors.New("table gone")}, client, nil),
	} {
		if g := c.Gather(context.Background(), "/v1/insight", time.Second); !slices.Equal(g.Nodes, []string{"http://self"}) || g.Missing != nil {
			t.Errorf("%s: gathered %q, missing %q; want this node alone", name, g.Nodes, g.Missing)
		}
	}
	var none *Cluster
	if g := none.GatherFor(r, "/v1/insight"); !slices.Equal(g.Nodes, []string{""}) {
		t.Errorf("no cluster: gathered %q, want this node alone, unnamed", g.Nodes)
	}
}

// TestPeers: the other nodes, without this one, read from the store once
// per 5 seconds however often asked.
func TestPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &store{nodes: []string{"http://a", "http://self", "http://b"}}
		c := NewCluster("http://self", st, nil, nil)
		for range 3 {
			if got, err := c.Peers(t.Context()); err != nil || !slices.Equal(got, []string{"http://a", "http://b"}) {
				t.Fatalf("Peers = %q, %v; want the others", got, err)
			}
		}
		time.Sleep(DefaultHeartbeat - time.Nanosecond)
		c.Peers(t.Context())
		if st.reads != 1 {
			t.Fatalf("%d reads of the store within 5s, want 1", st.reads)
		}
		time.Sleep(time.Nanosecond)
		st.mu.Lock()
		st.nodes = []string{"http://self"}
		st.mu.Unlock()
		if got, _ := c.Peers(t.Context()); len(got) != 0 || st.reads != 2 {
			t.Fatalf("after 5s: Peers = %q after %d reads; want the store read again, and no other node", got, st.reads)
		}
	})
}

// TestPeersWaitOnNoSlowRead: while one caller reads a slow store, the
// others take the list read last at once: no dashboard request waits on
// another's read.
func TestPeersWaitOnNoSlowRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &store{nodes: []string{"http://a", "http://self"}}
		c := NewCluster("http://self", st, nil, nil)
		c.Peers(t.Context())
		time.Sleep(DefaultHeartbeat)
		hold := make(chan struct{})
		st.mu.Lock()
		st.hold, st.nodes = hold, []string{"http://b", "http://self"}
		st.mu.Unlock()
		done := make(chan []string)
		go func() {
			got, _ := c.Peers(t.Context())
			done <- got
		}()
		synctest.Wait() // the first caller is in the store
		if got, err := c.Peers(t.Context()); err != nil || !slices.Equal(got, []string{"http://a"}) {
			t.Errorf("beside a slow read: Peers = %q, %v; want the list read last, at once", got, err)
		}
		close(hold)
		if got := <-done; !slices.Equal(got, []string{"http://b"}) {
			t.Errorf("the slow read: %q, want the new list", got)
		}
		if got, _ := c.Peers(t.Context()); !slices.Equal(got, []string{"http://b"}) || st.reads != 2 {
			t.Errorf("after it: Peers = %q after %d reads; want the new list, 2 reads", got, st.reads)
		}
	})
}

// TestAnnounce: a node announces itself at once and every 5 seconds, live
// for 15, until its context ends; without a store it returns at once.
func TestAnnounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &store{}
		c := NewCluster("http://self", st, nil, nil)
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Announce(ctx)
		}()
		every, ttl := DefaultHeartbeat, 3*DefaultHeartbeat
		time.Sleep(2*every + time.Second)
		synctest.Wait()
		cancel()
		<-done
		want := []time.Time{start.Add(ttl), start.Add(every + ttl), start.Add(2*every + ttl)}
		if !slices.EqualFunc(st.announced, want, time.Time.Equal) {
			t.Fatalf("announced until %v, want %v", st.announced, want)
		}

		NewCluster("http://self", nil, nil, nil).Announce(t.Context()) // returns
	})
}

// TestLiveness: a node's run is live once its heartbeat lands, and for
// three heartbeat periods after the last that did; one that has not
// landed since admits nothing (Self), and when one lands again the node
// runs under a new tag, its old one named dead at once. Another run is
// dead one period after its heartbeat ended, and named so only while its
// leases may live, never if a live run has its tag.
func TestLiveness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		every := time.Second
		now := time.Now()
		st := &store{runs: []sluice.Heartbeat{
			{Node: "http://gone", Tag: 7, Until: now.Add(-2 * every)},                        // dead
			{Node: "http://late", Tag: 8, Until: now.Add(-every / 2)},                        // ended, within its grace
			{Node: "http://old", Tag: 9, Until: now.Add(-gateway.CountBackstop - time.Hour)}, // dead past its leases' life
			{Node: "http://twin", Tag: 11, Until: now.Add(-time.Hour)},                       // dead, but ...
			{Node: "http://b", Tag: 11, Until: now.Add(time.Hour)},                           // ... a live run has its tag
		}}
		c := NewCluster("http://self", st, nil, nil).WithHeartbeat(every)
		if _, live := c.Self(); live {
			t.Fatal("live before any heartbeat landed")
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Announce(ctx)
		}()
		synctest.Wait()
		first, live := c.Self()
		if !live || first == 0 {
			t.Fatalf("after a heartbeat: tag %d, live %v", first, live)
		}
		if dead := c.Dead(); !slices.Equal(dead, []uint16{7}) {
			t.Fatalf("dead runs %v, want [7]: not the one within its grace, the one past its leases' life, nor a live run's tag", dead)
		}
		if peers, _ := c.Peers(t.Context()); !slices.Equal(peers, []string{"http://b"}) {
			t.Fatalf("peers %q, want the live other node", peers)
		}
		for node, gone := range map[string]bool{"http://gone": true, "http://twin": true, "http://old": true, "http://b": false, "http://late": false, "http://new": false} {
			if c.Gone(node) != gone {
				t.Errorf("Gone(%s) = %v, want %v", node, !gone, gone)
			}
		}
		// The store goes down: live for three periods from the last
		// heartbeat that landed, then not.
		st.mu.Lock()
		st.down = true
		st.mu.Unlock()
		time.Sleep(3*every - time.Millisecond)
		if tag, live := c.Self(); !live || tag != first {
			t.Fatalf("within its heartbeat's life: tag %d live %v", tag, live)
		}
		time.Sleep(time.Millisecond)
		if _, live := c.Self(); live {
			t.Fatal("live past its heartbeat's life")
		}
		st.mu.Lock()
		st.down = false
		st.mu.Unlock()
		time.Sleep(every)
		synctest.Wait()
		tag, live := c.Self()
		if !live || tag == first || tag == 0 {
			t.Fatalf("after a heartbeat landed again: tag %d (was %d), live %v; want a new tag", tag, first, live)
		}
		if dead := c.Dead(); !slices.Contains(dead, first) || dead[0] != first {
			t.Fatalf("dead runs %v: want its old tag %d named first, at once", dead, first)
		}
		cancel()
		<-done
	})
}
