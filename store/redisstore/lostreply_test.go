package redisstore_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// dropProxy is a TCP proxy to a Redis that, once armed, forwards the next
// script call and drops the connection instead of its reply: a write made
// whose answer is lost.
type dropProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	dropped atomic.Bool
	wg      sync.WaitGroup
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var drop atomic.Bool // the next reply on this connection is dropped
	p.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if err != nil {
				c.Close()
				return
			}
			if drop.Load() {
				p.dropped.Store(true)
				c.Close()
				s.Close()
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if bytes.Contains(bytes.ToUpper(buf[:n]), []byte("EVALSHA")) && p.armed.CompareAndSwap(true, false) {
			drop.Store(true)
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestLostReply: a decision whose script ran but whose answer was lost,
// sent again by go-redis on a new connection, counts once: the second run
// answers the call's own write, which it recognises by its id.
func TestLostReply(t *testing.T) {
	p := newDropProxy(t, redistest.Get(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: 3})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Options{Prefix: redistest.Prefix(t), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pol := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	k := sluice.Key{Tenant: "acme", Algorithm: pol.Algorithm, Policy: "p", Value: "u"}
	apply := func(hits int64) sluice.Decision {
		t.Helper()
		dst := make([]sluice.Decision, 1)
		if err := s.Apply(context.Background(), t0, []sluice.Op{{Key: k, Policy: &pol, Hits: hits}}, dst); err != nil {
			t.Fatal(err)
		}
		return dst[0]
	}
	apply(1) // loads the script
	p.armed.Store(true)
	if d := apply(1); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("the decision whose answer was lost: %+v, want allowed with 3 remaining", d)
	}
	if !p.dropped.Load() {
		t.Fatal("no answer was dropped")
	}
	if d := apply(0); d.Remaining != 3 {
		t.Fatalf("after a lost answer: %d remaining, want 3 (two hits)", d.Remaining)
	}
}
