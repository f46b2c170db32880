package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
	"github.com/sluicehq/sluice/store/storetest"
)

var t0 = time.Date(2026, 11, 21, 13, 37, 11, 123_456_789, time.UTC)

// nodes returns n stores on one Redis and one prefix, each with a client
// of its own: n Sluice nodes sharing their counters.
func nodes(t *testing.T, n int) []*redisstore.Store {
	prefix := redistest.Prefix(t)
	ss := make([]*redisstore.Store, n)
	for i := range ss {
		ss[i] = newStore(t, redisstore.Options{Prefix: prefix, Timeout: 30 * time.Second})
	}
	return ss
}

// race runs workers goroutines over the stores, each applying ops() until
// a denial, and returns how many requests were admitted.
func race(t *testing.T, ss []*redisstore.Store, workers int, ops func() []sluice.Op) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			s := ss[w%len(ss)]
			for {
				o := ops()
				dst := make([]sluice.Decision, len(o))
				if err := s.Apply(context.Background(), t0, o, dst); err != nil {
					errs <- err
					return
				}
				for _, d := range dst {
					if !d.Allowed {
						return
					}
				}
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// TestNodesExact: three nodes racing on one key admit exactly the limit,
// for every algorithm: the script's comparison, not a node's lock, keeps
// them exact.
func TestNodesExact(t *testing.T) {
	const limit = 200
	for _, p := range storetest.Policies(limit) {
		t.Run(p.Name, func(t *testing.T) {
			ss := nodes(t, 3)
			k := sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "race"}
			got := race(t, ss, 24, func() []sluice.Op { return []sluice.Op{{Key: k, Policy: &p, Hits: 1}} })
			if got != limit {
				t.Fatalf("admitted %d, want exactly %d", got, limit)
			}
		})
	}
}

// TestNodesBurnExact: three nodes racing burn ops (sluice.Op.Burn) on one
// counter land each burn once (storetest.BurnRace).
func TestNodesBurnExact(t *testing.T) {
	for _, p := range []sluice.Policy{
		{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Minute},
		{Name: "month", Algorithm: sluice.Quota, Limit: 100, Calendar: sluice.Month},
	} {
		t.Run(p.Name, func(t *testing.T) {
			ss := nodes(t, 3)
			k := sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "race"}
			storetest.BurnRace(t, []sluice.Store{ss[0], ss[1], ss[2]}, &p, k, 24, 10)
		})
	}
}

// TestNodesAllOrNothing: three nodes racing with requests on a tight and a
// loose policy: the loose one consumed exactly what the tight one admitted.
func TestNodesAllOrNothing(t *testing.T) {
	ss := nodes(t, 3)
	loose := sluice.Policy{Name: "loose", Algorithm: sluice.SlidingWindow, Limit: 500, Window: time.Minute}
	tight := sluice.Policy{Name: "tight", Algorithm: sluice.TokenBucket, Limit: 150, Window: time.Minute}
	lk := sluice.Key{Tenant: "acme", Algorithm: loose.Algorithm, Policy: "loose", Value: "k"}
	tk := sluice.Key{Tenant: "acme", Algorithm: tight.Algorithm, Policy: "tight", Value: "k"}
	got := race(t, ss, 24, func() []sluice.Op {
		return []sluice.Op{{Key: lk, Policy: &loose, Hits: 1}, {Key: tk, Policy: &tight, Hits: 1}}
	})
	if got != tight.Limit {
		t.Fatalf("admitted %d, want exactly %d", got, tight.Limit)
	}
	dst := make([]sluice.Decision, 1)
	if err := ss[0].Apply(context.Background(), t0, []sluice.Op{{Key: lk, Policy: &loose}}, dst); err != nil {
		t.Fatal(err)
	}
	if dst[0].Remaining != loose.Limit-tight.Limit {
		t.Fatalf("loose policy has %d remaining, want %d", dst[0].Remaining, loose.Limit-tight.Limit)
	}
}

// counter counts the commands a client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestOneRoundTrip: on one node, a decision is one command, new keys and
// known keys alike, once the script is loaded; after another node's write
// it is two, and a flushed script costs one more.
func TestOneRoundTrip(t *testing.T) {
	c := redistest.Client(t)
	// The connection's handshake is not the store's; the script starts
	// unloaded (other tests share the server).
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	cnt := &counter{}
	c.AddHook(cnt)
	prefix := redistest.Prefix(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t, redisstore.Options{Prefix: prefix})
	ps := storetest.Policies(100)
	ops := make([]sluice.Op, len(ps))
	for i := range ps {
		ops[i] = sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: ps[i].Algorithm, Policy: ps[i].Name, Value: "u"}, Policy: &ps[i], Hits: 1}
	}
	dst := make([]sluice.Decision, len(ops))
	apply := func(s *redisstore.Store, wantCmds int64) {
		t.Helper()
		before := cnt.n.Load()
		if err := s.Apply(context.Background(), t0, ops, dst); err != nil {
			t.Fatal(err)
		}
		if got := cnt.n.Load() - before; s != other && got != wantCmds {
			t.Fatalf("%d commands, want %d", got, wantCmds)
		}
	}
	apply(s, 2) // EVALSHA answers NOSCRIPT, then EVAL loads it
	apply(s, 1)
	apply(s, 1)
	apply(other, 0)
	apply(s, 2) // the first comparison fails: decided again from the answer
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	apply(s, 2)
	for _, d := range dst {
		if !d.Allowed || d.Remaining != 100-6 {
			t.Fatalf("%+v, want allowed with %d remaining", d, 100-6)
		}
	}
}

// TestTenantHashTag: every key a tenant's decisions write carries the
// tenant's hash tag, so that Redis Cluster puts them in one slot, and
// expires.
func TestTenantHashTag(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ps := storetest.Policies(10)
	for _, tenant := range []string{"acme", "a}b{c", ""} {
		var ops []sluice.Op
		for i := range ps {
			for _, sp := range []sluice.Space{sluice.SpacePolicy, sluice.SpaceInternal} {
				ops = append(ops, sluice.Op{Key: sluice.Key{Tenant: tenant, Epoch: int64(i), Space: sp, Algorithm: ps[i].Algorithm, Policy: ps[i].Name, Value: "v}{"}, Policy: &ps[i], Hits: 1})
			}
		}
		if err := s.Apply(context.Background(), t0, ops, make([]sluice.Decision, len(ops))); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]int{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		open, end := strings.IndexByte(rest, '{'), strings.IndexByte(rest, '}')
		if open != 0 || end < 2 {
			t.Fatalf("key %q has no hash tag right after the prefix", k)
		}
		tags[rest[1:end]]++
		if ttl := c.PTTL(context.Background(), k).Val(); ttl <= 0 {
			t.Errorf("key %q has no time to live (%v)", k, ttl)
		}
	}
	if len(keys) != 3*2*len(ps) || len(tags) != 3 || tags["=acme"] != 2*len(ps) {
		t.Fatalf("%d keys with tags %v, want %d keys under 3 tags", len(keys), tags, 3*2*len(ps))
	}
}

// TestUnanswered: a Redis that never answers fails the call with the
// unavailability the policies' fail modes act on, at the store's deadline:
// a client from Dial heeds it even with no read timeout of its own (the
// call would hang without ContextTimeoutEnabled; the test allows a minute).
func TestUnanswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered, until the listener closes
		}
	}()
	c, err := redisstore.Dial("redis://" + ln.Addr().String() + "?read_timeout=-1&write_timeout=-1&max_retries=-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	done := make(chan error, 1)
	go func() {
		done <- s.Apply(context.Background(), t0, []sluice.Op{{Key: sluice.Key{Tenant: "a", Policy: "p"}, Policy: &p, Hits: 1}}, make([]sluice.Decision, 1))
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Apply on a silent Redis did not end at its deadline")
	}
	var se *sluice.Error
	if !errors.As(err, &se) || se.Kind != sluice.KindUnavailable {
		t.Fatalf("Apply on a silent Redis: %v, want KindUnavailable", err)
	}
}

func TestPrefixWithBrace(t *testing.T) {
	if _, err := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "a{b}:"}); err == nil {
		t.Fatal("a prefix with a brace was accepted")
	}
}

// TestAuthURL: a store reaches a Redis that requires a password through
// the URL form the server's --redis-url will take (redis.ParseURL), and a
// wrong password fails as unavailable.
func TestAuthURL(t *testing.T) {
	srv := redistest.StartOwn(t, "--requirepass", "s3cret")
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "a", Policy: "p"}, Policy: &p, Hits: 1}}
	for _, tc := range []struct {
		url string
		ok  bool
	}{{"redis://:s3cret@" + srv.Addr + "/0", true}, {"redis://:wrong@" + srv.Addr + "/0", false}} {
		o, err := redis.ParseURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(o)
		defer c.Close()
		s, err := redisstore.New(c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Apply(context.Background(), t0, ops, make([]sluice.Decision, 1))
		var se *sluice.Error
		if tc.ok && err != nil || !tc.ok && (!errors.As(err, &se) || se.Kind != sluice.KindUnavailable) {
			t.Fatalf("%s: %v", tc.url, err)
		}
	}
}

// TestPeekWritesNoKey: a request of zero hits on keys never seen leaves
// Redis without them (algo's read of a fresh key is a state of count 0,
// which is not worth a write).
func TestPeekWritesNoKey(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var ops []sluice.Op
	ps := storetest.Policies(5)
	for i := range ps {
		ops = append(ops, sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: ps[i].Algorithm, Policy: ps[i].Name, Value: "peek"}, Policy: &ps[i]})
	}
	if err := s.Apply(context.Background(), t0, ops, make([]sluice.Decision, len(ops))); err != nil {
		t.Fatal(err)
	}
	if keys := c.Keys(context.Background(), prefix+"*").Val(); len(keys) != 0 {
		t.Fatalf("a peek wrote %d keys", len(keys))
	}
}

// TestPingLoadsScript: a readiness check loads the decisions' script, so
// that the first decision after Redis forgot it (a restart, SCRIPT FLUSH)
// is one command, not two.
func TestPingLoadsScript(t *testing.T) {
	c := redistest.Client(t)
	cnt := &counter{}
	c.AddHook(cnt)
	s, err := redisstore.New(c, redisstore.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := sluice.Policy{Name: "p", Algorithm: sluice.SlidingWindow, Limit: 5, Window: time.Minute}
	before := cnt.n.Load()
	dst := make([]sluice.Decision, 1)
	if err := s.Apply(context.Background(), t0, []sluice.Op{{Key: sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: "p", Value: "u"}, Policy: &p, Hits: 1}}, dst); err != nil {
		t.Fatal(err)
	}
	if n := cnt.n.Load() - before; n != 1 {
		t.Fatalf("the first decision after a ping: %d commands, want 1", n)
	}
}
