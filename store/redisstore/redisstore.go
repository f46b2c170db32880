// Package redisstore is a sluice.Store on Redis or Valkey, for users who
// run one already: standalone, Sentinel or Cluster, as go-redis reaches it.
//
// The algorithms stay in package algo: a decision reads its keys' states
// (algo.State's binary encoding, as pebblestore stores it, and the id of
// the call that wrote it), decides in Go
// with algo.DecideAll, and sends one Lua script (EVALSHA, loaded on first
// use and again after NOSCRIPT) that compares every key's stored bytes with
// those it decided from and, only if all match, writes every new state:
// all-or-nothing across a request's policies. The states it decides from
// are the store's last view of each key (a bounded cache, never trusted:
// the script checks it), so a decision on keys this node last wrote, or
// new keys, is one round trip; when another node has written since, the
// script answers with the current states instead and the store decides
// again from them, one more round trip per lost race, within the call's
// deadline. docs/design/redis-store.md has the design.
//
// Every key of a tenant is in one hash slot: the tenant's id is the key's
// hash tag, so a request's ops (one tenant's) run in one script on Redis
// Cluster.
package redisstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key the store writes, so that deployments (or
	// tests) can share a Redis. It may not hold '{' or '}' (the hash tag
	// is the tenant's). Default "sluice:".
	Prefix string
	// Timeout bounds each call (Apply, Release, Renew, EraseKey), retries
	// after lost races included, when the caller's context has no earlier
	// deadline. Default 1s.
	Timeout time.Duration
	// CacheKeys bounds the states the store remembers to decide from in
	// one round trip. Default 65536.
	CacheKeys int
	// ExpirySlack is added to a state's time to live in Redis, past the
	// instant the algorithm says it is worth nothing, so that a clock of
	// another node behind this one's by less still reads it. Default 10s.
	ExpirySlack time.Duration
	// Logger receives what the store drops (an unreadable state). Default
	// slog.Default().
	Logger *slog.Logger
}

// Store is a sluice.Store on Redis. It is safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	opts   Options
	closed atomic.Bool
	// loaded is whether a ping has loaded the decisions' script since
	// the last ping that failed: a ping loads it only then, so that a
	// readiness poll every second sends Redis a PING, not the script.
	loaded atomic.Bool

	turns *turns

	mu    sync.Mutex
	cache map[string]string // key -> stored bytes ("" absent), as last seen
}

var (
	_ sluice.Store     = (*Store)(nil)
	_ sluice.KeyEraser = (*Store)(nil)
)

// New returns a store on c: a *redis.Client (AUTH, TLS and the address in
// its Options or redis.ParseURL), a *redis.ClusterClient, a Sentinel
// client (redis.NewFailoverClient) or any redis.UniversalClient; Dial
// makes one from a URL. go-redis heeds a context's deadline on the wire
// only with ContextTimeoutEnabled set in its options (Dial sets it);
// without, a call's reads are bounded by the client's ReadTimeout instead
// of Options.Timeout. The caller owns c: Close does not close it.
func New(c redis.UniversalClient, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = "sluice:"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q holds a brace: the hash tag is the tenant's", opts.Prefix)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.CacheKeys <= 0 {
		opts.CacheKeys = 1 << 16
	}
	if opts.ExpirySlack <= 0 {
		opts.ExpirySlack = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Store{c: c, opts: opts, turns: newTurns(), cache: make(map[string]string)}, nil
}

// Close makes later calls return sluice.ErrStoreClosed. It does not close
// the client, which is the caller's.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Ping reports whether Redis answers, within the call's deadline, for
// readiness checks (/readyz), and loads the decisions' script on the
// first ping and the first after one failed, so that a new node's first
// decision, or the first after Redis restarted (which forgets scripts),
// is one round trip. (A restart no ping saw costs one decision a second
// round trip: the script is sent again when Redis does not know it.) On
// Cluster it asks every master, since a tenant's keys may be on any of
// them.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	load := !s.loaded.Load()
	ping := func(ctx context.Context, c interface {
		redis.Scripter
		Ping(context.Context) *redis.StatusCmd
	}) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		if load {
			return casScript.Load(ctx, c).Err()
		}
		return nil
	}
	var err error
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return ping(ctx, c) })
	} else {
		err = ping(ctx, s.c)
	}
	if err != nil {
		s.loaded.Store(false)
		return errStore("Ping", err)
	}
	if load {
		s.loaded.Store(true)
	}
	return nil
}

// tag is the hash tag of a tenant's keys: "{=id}", or "{~base64}" for an
// id that holds a brace, so that the tag ends where the id does and is
// never empty (Redis hashes a key whose tag is "{}" whole).
func tag(tenant string) string {
	if strings.ContainsAny(tenant, "{}") {
		return "{~" + base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "}"
	}
	return "{=" + tenant + "}"
}

// epochMark precedes a counter key's epoch, where a key without one has
// its space: no space is 0x7f (as in pebblestore).
const epochMark = 0x7f

// counterKey is k's Redis key: prefix, the tenant's hash tag, "c", the
// epoch if any, space and algorithm bytes, the policy length-prefixed, and
// the value. No two keys share one: the tag ends at the first '}', the
// policy's length bounds it, and the value is the rest.
func (s *Store) counterKey(k *sluice.Key) string {
	b := make([]byte, 0, len(s.opts.Prefix)+len(k.Tenant)+len(k.Policy)+len(k.Value)+20)
	b = append(b, s.opts.Prefix...)
	b = append(b, tag(k.Tenant)...)
	b = append(b, 'c')
	if k.Epoch != 0 {
		b = binary.AppendUvarint(append(b, epochMark), uint64(k.Epoch))
	}
	b = append(b, byte(k.Space), byte(k.Algorithm))
	b = binary.AppendUvarint(b, uint64(len(k.Policy)))
	b = append(b, k.Policy...)
	b = append(b, k.Value...)
	if k.Region != "" {
		b = append(b, 0xff)
		b = append(b, k.Region...)
	}
	return string(b)
}

// casScript decides a call's writes. ARGV[1] is the call's id; each
// KEYS[i] has eight arguments from ARGV[8i-6]: the value the node decided
// from ("" for none), the value to write ("" nothing), its time to live in
// ms ("0" none), and a fixed window's spec (fixed.go): aligned start (""
// for no spec), window, limit, hits, and the node's verdict ("1" admitted).
// A key whose value is not the one decided from fails the call, unless it
// has a spec, its value is a fixed window's text (or none) not written by
// this call, and algo's rule on what it holds gives the node's verdict.
// If no key fails, it writes every value (a spec's key: its window with
// the hits added, as text, with the id) and answers 1 followed, for each
// key, by the value it held if its spec judged it, else "-". Otherwise it
// writes nothing and answers every key's value.
var casScript = redis.NewScript(`
local id = ARGV[1]
local cur, fw = {}, {}
local ok = true
for i = 1, #KEYS do
  local a = 8*(i-1) + 1
  local v = redis.call('GET', KEYS[i]) or ''
  cur[i] = v
  if v ~= ARGV[a+1] then
    local start = ARGV[a+4]
    if start == '' or (v ~= '' and (string.byte(v, 1) ~= 70 or string.sub(v, -8) == id)) then
      ok = false
    else
      local wstart, count = start, 0
      if v ~= '' then
        local s = string.sub(v, 2, 20)
        if s >= start then wstart, count = s, tonumber(string.sub(v, 42, -9)) end
      end
      local limit, hits = tonumber(ARGV[a+6]), tonumber(ARGV[a+7])
      local allow = hits <= limit and count + hits <= limit
      if allow ~= (ARGV[a+8] == '1') then ok = false else fw[i] = {wstart, count + hits} end
    end
  end
end
if not ok then return cur end
local out = {1}
for i = 1, #KEYS do
  local a = 8*(i-1) + 1
  local v, ttl = ARGV[a+2], ARGV[a+3]
  out[i+1] = '-'
  if fw[i] then
    out[i+1] = cur[i]
    if v ~= '' then v = 'F' .. fw[i][1] .. ':' .. ARGV[a+5] .. ':' .. string.format('%d', fw[i][2]) .. id end
  end
  if v ~= '' then
    if ttl == '0' then redis.call('SET', KEYS[i], v) else redis.call('SET', KEYS[i], v, 'PX', ttl) end
  end
end
return out
`)

// A stored value is the state's encoding (algo.State.MarshalBinary)
// followed by the id of the call that wrote it, idLen bytes, so that a
// call whose answer was lost and whose script the client sent again
// (go-redis retries a command on a broken connection) finds its own write
// in the values the second run answers, and counts once.
const idLen = 8

// statePart is a stored value without its writer's id.
func statePart(v string) string {
	if len(v) < idLen {
		return v
	}
	return v[:len(v)-idLen]
}

// errStore wraps a Redis failure as the unavailability the policies' fail
// modes act on.
func errStore(op string, err error) error {
	var se *sluice.Error
	if errors.As(err, &se) {
		return err
	}
	return &sluice.Error{Op: "redisstore." + op, Kind: sluice.KindUnavailable, Err: err}
}

func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.opts.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// view returns the store's last view of keys.
func (s *Store) view(keys []string, cur []string) {
	s.mu.Lock()
	for i, k := range keys {
		cur[i] = s.cache[k]
	}
	s.mu.Unlock()
}

// remember records what keys hold, evicting arbitrary entries past the cap.
func (s *Store) remember(keys []string, vals []string) {
	s.mu.Lock()
	for i, k := range keys {
		if vals[i] == "" {
			delete(s.cache, k)
			continue
		}
		if _, ok := s.cache[k]; !ok && len(s.cache) >= s.opts.CacheKeys {
			for old := range s.cache {
				delete(s.cache, old)
				break
			}
		}
		s.cache[k] = vals[i]
	}
	s.mu.Unlock()
}

func (s *Store) forget(keys []string) {
	s.mu.Lock()
	for _, k := range keys {
		delete(s.cache, k)
	}
	s.mu.Unlock()
}

// decode reads a stored state (without its writer's id); an unreadable
// one counts as none, logged.
func (s *Store) decode(key, v string) algo.State {
	var st algo.State
	if v == "" {
		return st
	}
	if v[0] == 'F' {
		st, err := decodeFixed(v)
		if err != nil {
			s.opts.Logger.Error("redisstore: unreadable counter state dropped", "key", key, "err", err)
			return algo.State{}
		}
		return st
	}
	if err := st.UnmarshalBinary([]byte(v)); err != nil {
		s.opts.Logger.Error("redisstore: unreadable counter state dropped", "key", key, "err", err)
		return algo.State{}
	}
	return st
}

// write is one key's part of a script run: the value to write ("" none)
// and its time to live argument.
func (s *Store) write(st *algo.State, now int64) (string, string) {
	var b []byte
	if fixedText(st) {
		b = []byte(encodeFixed(st))
	} else {
		var err error
		if b, err = st.MarshalBinary(); err != nil {
			panic(err) // AppendBinary never fails
		}
	}
	if st.Expires == 0 {
		return string(b), "0"
	}
	// A state already worth nothing is kept for the slack alone: written,
	// not deleted, so that it carries the call's id.
	ms := (max(st.Expires-now, 0)+int64(time.Millisecond)-1)/int64(time.Millisecond) + s.opts.ExpirySlack.Milliseconds()
	return string(b), strconv.FormatInt(ms, 10)
}

// cas runs one decision over keys, in the turns of turnKeys (those of
// keys the script does not judge): decide computes, from the keys' current
// states (encoded, "" for none), each key's new state and ttl argument (""
// to leave it) and, where the script may judge a fixed window itself, its
// spec (fixed.go); it is called again with the values the script answers
// until the script's comparison holds, and once more with the values a
// spec's judgement read, so that its decisions are of those.
func (s *Store) cas(ctx context.Context, op string, keys, turnKeys []string, decide func(cur []string, vals, ttls []string, specs []fixedSpec)) error {
	done, err := s.turns.take(ctx, turnKeys)
	if err != nil {
		return errStore(op, err)
	}
	defer done()
	var idb [idLen]byte
	binary.LittleEndian.PutUint64(idb[:], rand.Uint64())
	id := string(idb[:])
	cur := make([]string, len(keys))    // stored values
	states := make([]string, len(keys)) // their states
	vals := make([]string, len(keys))
	ttls := make([]string, len(keys))
	specs := make([]fixedSpec, len(keys))
	args := make([]any, 1+8*len(keys))
	args[0] = id
	s.view(keys, cur)
	// run decides from cur, and sets the script's arguments.
	run := func() {
		for i := range cur {
			states[i] = statePart(cur[i])
			specs[i] = fixedSpec{}
		}
		decide(states, vals, ttls, specs)
		for i := range keys {
			if vals[i] == states[i] {
				vals[i] = "" // unchanged: nothing to write
			}
			if vals[i] != "" {
				vals[i] += id
			}
			verdict := "0"
			if specs[i].allowed {
				verdict = "1"
			}
			a := args[1+8*i:]
			a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = cur[i], vals[i], ttls[i],
				specs[i].start, specs[i].window, specs[i].limit, specs[i].hits, verdict
		}
	}
	for {
		run()
		res, err := casScript.Run(ctx, s.c, keys, args...).Result()
		if err != nil {
			s.forget(keys)
			return errStore(op, err)
		}
		r, ok := res.([]any)
		if !ok {
			return errStore(op, fmt.Errorf("script answered a %T", res))
		}
		if len(r) == len(keys)+1 && r[0] == int64(1) {
			// Written. Where a spec judged a value other than the one
			// decided from, decide again from it: the same verdicts
			// (the script checked them), the same writes, and decisions
			// of the state that was there.
			again := false
			for i := range keys {
				if v, ok := r[i+1].(string); ok && v != "-" {
					cur[i], again = v, true
				}
			}
			if again {
				run()
			}
			for i := range keys {
				if vals[i] != "" {
					cur[i] = vals[i]
				}
			}
			s.remember(keys, cur)
			return nil
		}
		if len(r) != len(keys) {
			return errStore(op, fmt.Errorf("script answered %d values for %d keys", len(r), len(keys)))
		}
		for i, v := range r {
			str, ok := v.(string)
			if !ok {
				return errStore(op, fmt.Errorf("script answered a %T", v))
			}
			cur[i] = str
		}
		s.remember(keys, cur)
		if landed(cur, vals, id) {
			return nil // an earlier run of this script wrote: its answer was lost
		}
		if err := ctx.Err(); err != nil {
			return errStore(op, err)
		}
	}
}

// landed reports whether the values hold a write of this call: its id is
// in every value it writes, which no other call writes.
func landed(cur, vals []string, id string) bool {
	for i := range vals {
		if vals[i] != "" && strings.HasSuffix(cur[i], id) {
			return true
		}
	}
	return false
}

// Apply implements sluice.Store.
func (s *Store) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	// Distinct keys, and for each op its key's index.
	// An op of zero hits reads: the state a key is left with is its last
	// op's of nonzero hits (none: nothing to write), as memstore and
	// dynamostore store it.
	keys := make([]string, 0, len(ops))
	at := make([]int, len(ops))
	last := make([]int, 0, len(ops))  // last op of nonzero hits of each key, or -1
	count := make([]int, 0, len(ops)) // ops of each key
	for i := range ops {
		k := s.counterKey(&ops[i].Key)
		at[i] = -1
		for j, kk := range keys {
			if kk == k {
				at[i] = j
				break
			}
		}
		if at[i] < 0 {
			at[i] = len(keys)
			keys = append(keys, k)
			last = append(last, -1)
			count = append(count, 0)
		}
		count[at[i]]++
		if ops[i].Hits != 0 {
			last[at[i]] = i
		}
	}
	nowNs := now.UnixNano()
	// A key the script judges needs no turn: the node's own decisions on
	// it do not fail each other's comparison (only a verdict a stale view
	// got wrong does, and is decided again), so a hot fixed window is
	// decided as fast as Redis runs scripts, not one round trip at a time.
	judged := make([]bool, len(keys))
	turnKeys := make([]string, 0, len(keys))
	for i := range ops {
		if _, ok := specOf(&ops[i], nowNs, false); ok && count[at[i]] == 1 {
			judged[at[i]] = true
		}
	}
	for j, k := range keys {
		if !judged[j] {
			turnKeys = append(turnKeys, k)
		}
	}
	stored := make([]algo.State, len(ops))
	next := make([]algo.State, len(ops))
	return s.cas(ctx, "Apply", keys, turnKeys, func(cur []string, vals, ttls []string, specs []fixedSpec) {
		for i := range ops {
			stored[i] = s.decode(keys[at[i]], cur[at[i]])
		}
		allowed := algo.DecideAll(ops, stored, next, nowNs, dst)
		for j := range keys {
			vals[j], ttls[j] = "", ""
			if allowed && last[j] >= 0 {
				vals[j], ttls[j] = s.write(&next[last[j]], nowNs)
			}
		}
		// A key of one op, a fixed window's, the script judges.
		for i := range ops {
			if judged[at[i]] {
				specs[at[i]], _ = specOf(&ops[i], nowNs, dst[i].Allowed)
			}
		}
	})
}

// Release implements sluice.Store.
func (s *Store) Release(ctx context.Context, now time.Time, key sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.lease(ctx, "Release", now, key, p, lease, algo.Release)
}

// Renew implements sluice.Store.
func (s *Store) Renew(ctx context.Context, now time.Time, key sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.lease(ctx, "Renew", now, key, p, lease, algo.Renew)
}

func (s *Store) lease(ctx context.Context, op string, now time.Time, key sluice.Key, p *sluice.Policy, lease uint64,
	f func(*sluice.Policy, algo.State, int64, uint64) (algo.State, sluice.Decision, bool)) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrStoreClosed
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	keys := []string{s.counterKey(&key)}
	nowNs := now.UnixNano()
	var d sluice.Decision
	var found bool
	err := s.cas(ctx, op, keys, keys, func(cur []string, vals, ttls []string, _ []fixedSpec) {
		var st algo.State
		st, d, found = f(p, s.decode(keys[0], cur[0]), nowNs, lease)
		vals[0], ttls[0] = "", ""
		if found {
			vals[0], ttls[0] = s.write(&st, nowNs)
		}
	})
	if err != nil {
		return sluice.Decision{}, err
	}
	if !found {
		return sluice.Decision{}, sluice.ErrLeaseNotFound
	}
	return d, nil
}

// EraseKey implements sluice.KeyEraser. It deletes the known counters,
// under every algorithm, as DynamoDB does: finding a tenant's other
// counters would scan the whole keyspace (SCAN), which a Redis shared
// with others cannot afford.
func (s *Store) EraseKey(ctx context.Context, tenant, value string, known []sluice.Key) (int, error) {
	if s.closed.Load() {
		return 0, sluice.ErrStoreClosed
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	var keys []string
	seen := map[string]bool{}
	for _, k := range known {
		if k.Tenant != tenant || k.Value != value {
			continue
		}
		for _, alg := range sluice.Algorithms {
			k.Algorithm = alg
			if ck := s.counterKey(&k); !seen[ck] {
				seen[ck] = true
				keys = append(keys, ck)
			}
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	s.forget(keys)
	n, err := s.c.Del(ctx, keys...).Result()
	if err != nil {
		return 0, errStore("EraseKey", err)
	}
	return int(n), nil
}
