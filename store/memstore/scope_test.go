package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/storetest"
)

// scoped decides every single op it can through a Scope (not a burn op,
// which no Scope takes), and the rest through the Store: the conformance
// suite then holds the prepared path to what it holds Apply to.
type scoped struct{ *Store }

func (s scoped) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if len(ops) != 1 {
		return s.Store.Apply(ctx, now, ops, dst)
	}
	op := &ops[0]
	k, p := &op.Key, op.Policy
	if op.Lease != 0 || op.Burn || k.Region != "" || k.Algorithm != p.Algorithm || k.Policy != p.Name {
		return s.Store.Apply(ctx, now, ops, dst)
	}
	d, err := s.Scope(k.Tenant, k.Space, p)(ctx, now.UnixNano(), k.Value, op.Hits)
	dst[0] = d
	return err
}

func TestConformanceScoped(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return scoped{New(Options{})} })
}

func TestConformanceScopedCollisions(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s := New(Options{Shards: 1})
		s.collide = func(sluice.Key) uint64 { return 42 }
		return scoped{s}
	})
}

// TestScopeValues: values short and long, inline or not, some the prefix
// of another, are each a counter of their own, the same through a Scope
// and through ApplyOne.
func TestScopeValues(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprint("collide=", collide), func(t *testing.T) {
			s := New(Options{Shards: 1})
			defer s.Close()
			if collide {
				s.collide = func(sluice.Key) uint64 { return 7 }
			}
			p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Minute}
			apply := s.Scope("t", sluice.SpacePolicy, &p)
			values := []string{""}
			for _, n := range []int{1, inline - 1, inline, inline + 1, 64, sluice.MaxKeyLen} {
				values = append(values, strings.Repeat("v", n), strings.Repeat("v", n-1)+"w")
			}
			ctx := context.Background()
			now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
			// Value i takes i+1 hits, alternately through the Scope and
			// through ApplyOne.
			for i, v := range values {
				for j := range i + 1 {
					var err error
					if j%2 == 0 {
						_, err = apply(ctx, now.UnixNano(), v, 1)
					} else {
						_, err = s.ApplyOne(ctx, now, sluice.Op{Key: sluice.Key{Tenant: "t", Algorithm: p.Algorithm, Policy: "p", Value: v}, Policy: &p, Hits: 1})
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, v := range values {
				d, err := apply(ctx, now.UnixNano(), v, 0)
				if err != nil || d.Remaining != 100-int64(i+1) {
					t.Errorf("value of %d bytes: %+v %v, want %d remaining", len(v), d, err, 100-(i+1))
				}
			}
			if n := s.Len(); n != len(values) {
				t.Errorf("Len = %d, want %d", n, len(values))
			}
			other := s.Scope("t2", sluice.SpacePolicy, &p)
			if d, _ := other(ctx, now.UnixNano(), values[1], 0); d.Remaining != 100 {
				t.Errorf("another tenant's scope reads %+v", d)
			}
			inl := s.Scope("t", sluice.SpaceInline, &p)
			if d, _ := inl(ctx, now.UnixNano(), values[1], 0); d.Remaining != 100 {
				t.Errorf("another space's scope reads %+v", d)
			}
		})
	}
}

// TestScopeErrors: a Scope answers ErrStoreFull and ErrStoreClosed as
// ApplyOne does, and a store with a backing has no Scope.
func TestScopeErrors(t *testing.T) {
	s := New(Options{MaxKeys: 1, Shards: 1})
	p := fixed
	apply := s.Scope("t", sluice.SpacePolicy, &p)
	ctx := context.Background()
	now := time.Now().UnixNano()
	if _, err := apply(ctx, now, "a", 1); err != nil {
		t.Fatal(err)
	}
	if d, err := apply(ctx, now, "b", 1); !errors.Is(err, sluice.ErrStoreFull) || d != (sluice.Decision{}) {
		t.Fatalf("second key over a cap of 1: %+v %v", d, err)
	}
	if d, err := apply(ctx, now, "a", 1); err != nil || !d.Allowed {
		t.Fatalf("held key at the cap: %+v %v", d, err)
	}
	s.Close()
	if _, err := apply(ctx, now, "a", 1); !errors.Is(err, sluice.ErrStoreClosed) {
		t.Fatalf("after Close: %v", err)
	}
	b := New(Options{Backing: &recorder{}})
	defer b.Close()
	if b.Scope("t", sluice.SpacePolicy, &p) != nil {
		t.Fatal("a backed store offers a Scope")
	}
}

// recorder is a Backing that holds nothing and records what the sweep
// forgets.
type recorder struct{ forgot []sluice.Key }

func (r *recorder) Durable(*sluice.Policy) bool { return true }
func (r *recorder) Load(*sluice.Key, *sluice.Policy) (algo.State, bool, error) {
	return algo.State{}, false, nil
}
func (r *recorder) Save([]Saved) (func() error, error) { return nil, nil }
func (r *recorder) Forget(keys []sluice.Key)           { r.forgot = append(r.forgot, keys...) }

// TestSweepForgetsWholeKeys: the keys the sweep hands the backing are the
// keys decided, every part of them, whether the entry held the value
// inline or not.
func TestSweepForgetsWholeKeys(t *testing.T) {
	r := &recorder{}
	s := New(Options{Backing: r, Shards: 1})
	defer s.Close()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	keys := []sluice.Key{
		{Tenant: "t", Space: sluice.SpaceInline, Algorithm: sluice.FixedWindow, Policy: "p", Value: "short"},
		{Tenant: "t", Algorithm: sluice.FixedWindow, Policy: "p", Value: strings.Repeat("long", 20)},
		{Tenant: "u", Algorithm: sluice.FixedWindow, Policy: "q", Region: "eu", Value: ""},
	}
	for _, k := range keys {
		if _, err := s.ApplyOne(context.Background(), now, sluice.Op{Key: k, Policy: &fixed, Hits: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Sweep(now.Add(time.Hour)); n != len(keys) {
		t.Fatalf("swept %d, want %d", n, len(keys))
	}
	key := func(k sluice.Key) string { return fmt.Sprintf("%+v", k) }
	got, want := make([]string, 0, len(keys)), make([]string, 0, len(keys))
	for i := range keys {
		got, want = append(got, key(r.forgot[i])), append(want, key(keys[i]))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("forgot\n%v\nwant\n%v", got, want)
	}
}

// TestLayout: an entry is a cache line, and a shard has its own pair.
func TestLayout(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 64 {
		t.Errorf("entry is %d bytes, want 64", n)
	}
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Errorf("shard is %d bytes, want 128", n)
	}
}
