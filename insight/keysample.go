package insight

import (
	"cmp"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// KeySample keeps the decisions of a sample of a policy's keys over the
// last span, for trying a limit on past traffic, in a bounded number of
// bytes whatever the traffic:
//
//   - A key is kept whole or not at all: a sample of decisions would break
//     each key's windows, and a limit replayed on a whole key decides as
//     it would have.
//   - It starts with every key (p = 1). Over its bound, it halves p,
//     keeping a light key only if its hash falls under p, and keeping the
//     heaviest keys it holds (about the heavyKeys with the most decisions)
//     whatever their hash: on skewed traffic a few keys hold most of the
//     denials, and an estimate that missed them would be far off whatever
//     its stated error. (A key that p leaves out is not seen again,
//     however heavy it turns.)
//   - Over its bound, it shrinks whichever is larger: the light keys, by
//     halving p, or the largest heavy key, whose decisions it coarsens
//     into buckets of a width, one per interval with the count and hits of
//     its decisions: the narrowest width at which the buckets of the time
//     its log covers could take at most half the bytes its log took,
//     however its decisions fall. Whatever a key's rate, its buckets are
//     at most span/width + 2, so one key at any rate stays within its
//     share. Light keys are kept exact (a key that was heavy keeps its
//     buckets).
//
// Its bound is Bound bytes: 64 bytes per event of the max it is made with
// (room for max events of 16 bytes with the keys holding them), and at
// least 64 KiB. Bytes, its estimate of the heap it holds (its keys, their
// names, logs and tables, each as the allocator rounds it), never exceeds
// the bound when an Add returns.
//
// Add costs O(1) amortised, and sorts nothing. A key's log is a queue in
// chunks of 256 records, expired from its head as the key adds, grown and
// freed a chunk at a time; each Add also sweeps 16 slots of the tables of
// keys, dropping keys whose last decision is past the span; halving p
// drops a table of keys at once. Only coarsening a key passes over all its
// records, holding the lock for that pass (up to about a millisecond at
// the default bound): a hot key's history doubles some seven times in its
// first hour, each time coarsened, and the sample's share of the heaviest
// keys changes rarely after.
//
// Try replays a policy on the sample: the heavy keys' denials exactly,
// plus the light keys' over p (Horvitz-Thompson), with the standard error
// of the light part. A coarsened key's bucket is replayed as its count of
// decisions spread evenly over its interval, each with the bucket's mean
// hits: every decision is moved by less than the width, and the hits of
// one interval are evened out. For a fixed window whose length is a
// multiple of the width (both are aligned to the epoch, and the widths
// divide each other and a second, a minute, an hour), the decisions stay
// in their windows: the denials are exact if the key's hits are alike.
// For the other algorithms, bursts shorter than the width are smoothed:
// for a token bucket refilling at rate r, each burst's admissions may be
// off by up to about r times the width, mostly under-counting denials.
// Tried states how many decisions came from buckets and the widest
// interval.
//
// It is safe for concurrent use.
type KeySample struct {
	span  int64 // ns
	bound int
	seed  maphash.Seed

	mu       sync.Mutex
	shift    int        // a light key is kept if its level is at least shift: p = 2^-shift
	levels   [64]*table // the light keys by level
	used     uint64     // the levels with a table, a bit each
	heavy    table      // the heavy keys, kept whatever p
	heavyMin int64      // a light key with more decisions is tried as heavy; 0 while there is room
	bytes    int        // Bytes
	light    int        // the levels' part of bytes
	sweepLv  int        // the sweep's table: a level, or len(levels) for heavy
	sweepAt  int        // and its slot
}

// heavyKeys is how many of the heaviest keys a KeySample keeps whole
// whatever its p.
const heavyKeys = 32

// bytesPerEvent is the bound per event of NewKeySample's max, and
// minBound the least bound: room for the heavy keys at their widest, with
// the longest names.
const (
	bytesPerEvent = 64
	minBound      = 64 << 10
)

// sweepSlots is how many slots of its tables each Add sweeps, and
// sweepKeys how many of their keys, stopped, it may expire.
const (
	sweepSlots = 16
	sweepKeys  = 2
)

// keyLog is one key's decisions: exact events while it is not coarsened
// (wi < 0), buckets of the width widths[wi] once it is. Never both.
type keyLog struct {
	id       string // tenant "\x00" key
	hash     uint64
	count    int64 // decisions held
	logBytes int   // its logs' bytes when last settled
	gen      int   // counts rewrites of its records (coarsening), for Try's copies
	popped   int   // records expired from the head since the last rewrite
	home     *table
	tl       int32 // len(tenant)
	wi       int8  // the width of new buckets, widths[wi]; -1: exact
	heavy    bool  // in KeySample.heavy
	events   deque[event]
	bucket   deque[bucket]
}

func (l *keyLog) tenant() string { return l.id[:l.tl] }
func (l *keyLog) key() string    { return l.id[l.tl+1:] }

// live reports whether l is still in the sample.
func (l *keyLog) live() bool { return l.home != nil && !l.home.dropped }

// records returns how many events or buckets l holds.
func (l *keyLog) records() int { return l.events.n + l.bucket.n }

// last returns the time of l's last decision, or the least time if none.
func (l *keyLog) last() int64 {
	switch {
	case l.events.n > 0:
		return l.events.at(l.events.n - 1).t
	case l.bucket.n > 0:
		b := l.bucket.at(l.bucket.n - 1)
		return b.t + widths[b.w] - 1
	}
	return math.MinInt64
}

type event struct {
	t    int64 // unix ns
	hits int64
}

// bucket is n decisions of one key in [t, t+widths[w]), with hits in all.
type bucket struct {
	t    int64
	hits int64
	n    uint32
	w    uint8
}

// widths are the widths of buckets, each a multiple of the one before:
// fractions of a second down to 3.125 µs, then 1 s, 2 s, 10 s, 20 s, a
// minute, ..., an hour, ..., a day, then doubling. A window of a second,
// a minute or an hour is a multiple of every width up to it.
var widths = func() []int64 {
	var w []int64
	for d := int64(3125); d < 1953125; d *= 5 {
		w = append(w, d)
	}
	for d := int64(1953125); d <= int64(time.Second); d *= 2 {
		w = append(w, d)
	}
	for _, d := range []time.Duration{2 * time.Second, 10 * time.Second, 20 * time.Second, time.Minute, 2 * time.Minute,
		10 * time.Minute, 20 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 24 * time.Hour} {
		w = append(w, int64(d))
	}
	for d := 48 * int64(time.Hour); d < math.MaxInt64/4; d *= 2 {
		w = append(w, d)
	}
	return w
}()

// NewKeySample returns a sample of span of at most max(64 * events,
// 64 KiB) bytes: about that many events, fewer with many keys.
func NewKeySample(span time.Duration, events int) *KeySample {
	s := &KeySample{span: int64(span), bound: minBound, seed: maphash.MakeSeed()}
	if events > 0 && events <= math.MaxInt/bytesPerEvent {
		s.bound = max(minBound, bytesPerEvent*events)
	}
	s.bytes = allocSize(int(unsafe.Sizeof(*s)), true)
	return s
}

// Bound returns the most bytes the sample takes.
func (s *KeySample) Bound() int { return s.bound }

// Bytes returns the sample's estimate of the heap it holds: its keys'
// names, logs and tables, as the allocator rounds them.
func (s *KeySample) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Add records a decision of hits for tenant's key at now.
func (s *KeySample) Add(now time.Time, tenant, key string, hits int64) {
	s.add(now, []byte(keyID(tenant, key)), len(tenant), hits)
}

// keyID names tenant's key in a sketch or a sample.
func keyID(tenant, key string) string { return tenant + "\x00" + key }

// level returns a key's level, the leading zero bits of its hash (at most
// 63): a key of level v is kept while p >= 2^-v.
func level(h uint64) int { return min(bits.LeadingZeros64(h), 63) }

// add is Add with the key's id (keyID) made once by the caller, of a
// tenant of tl bytes: the id is copied only for a key new to the sample.
func (s *KeySample) add(now time.Time, id []byte, tl int, hits int64) {
	h := maphash.Bytes(s.seed, id)
	t := now.UnixNano()
	hits = min(max(hits, 1), sluice.MaxHits)
	s.mu.Lock()
	sl := s.heavy.find(h)
	if sl == nil {
		lv := level(h)
		if lv < s.shift {
			s.sweepLocked(t) // however few keys p keeps, every decision sweeps
			s.mu.Unlock()
			return
		}
		if tb := s.levels[lv]; tb != nil {
			sl = tb.find(h)
		}
		if sl == nil {
			sl = s.newKeyLocked(string(id), tl, h, lv, t)
		}
	}
	l := sl.l
	if l.id != string(id) { // two ids of one 64-bit hash: the first keeps it
		s.mu.Unlock()
		return
	}
	sl.last = max(sl.last, t) // before anything moves the slot
	s.expireLocked(l, t)
	l.append(t, hits)
	s.settleLocked(l)
	if !l.heavy && l.count > s.heavyMin {
		s.promoteLocked(l)
	}
	s.sweepLocked(t)
	if s.bytes > s.bound {
		s.shrinkLocked(t)
	}
	s.mu.Unlock()
}

// newKeyLocked adds an empty log for id, light, at level lv, and returns
// its slot, of a decision at t.
func (s *KeySample) newKeyLocked(id string, tl int, h uint64, lv int, t int64) *slot {
	l := &keyLog{id: id, hash: h, tl: int32(tl), wi: -1}
	tb := s.levelLocked(lv)
	s.putLocked(tb, l)
	sl := tb.find(h)
	sl.last = t
	return sl
}

// account adds d bytes to table tb's part of the sample.
func (s *KeySample) account(tb *table, d int) {
	tb.bytes += d
	s.bytes += d
	if tb != &s.heavy {
		s.light += d
	}
}

// settleLocked accounts for the change of l's logs' bytes since it was last
// settled.
func (s *KeySample) settleLocked(l *keyLog) {
	r := l.events.bytes + l.bucket.bytes
	if d := r - l.logBytes; d != 0 {
		l.logBytes = r
		s.account(l.home, d)
	}
}

// putLocked adds l, settled, to tb.
func (s *KeySample) putLocked(tb *table, l *keyLog) {
	l.logBytes = l.events.bytes + l.bucket.bytes
	l.home = tb
	s.account(tb, tb.put(slot{l.hash, l.last(), l})+l.bytes())
}

// removeLocked takes l out of the sample.
func (s *KeySample) removeLocked(l *keyLog) {
	tb := l.home
	s.account(tb, tb.del(l.hash)-l.bytes())
	l.home = nil
	if l.heavy {
		l.heavy = false
		s.heavyMin = 0
	}
	if lv := level(l.hash); tb != &s.heavy && tb.n == 0 {
		s.levels[lv] = nil
		s.used &^= 1 << lv
		tb.dropped = true
		s.account(tb, -tb.bytes)
	}
}

// promoteLocked makes light l heavy if it has more decisions than the
// lightest heavy key, by an eighth (so that keys of about the same count
// do not trade places on every decision), which turns light.
func (s *KeySample) promoteLocked(l *keyLog) {
	if s.heavy.n >= heavyKeys {
		m := s.lightestHeavyLocked()
		if l.count <= m.count+m.count/8 {
			s.heavyMin = m.count + m.count/8
			return
		}
		s.removeLocked(m)
		if lv := level(m.hash); lv >= s.shift {
			s.putLocked(s.levelLocked(lv), m)
		} // else p left m out: it goes
	}
	s.removeLocked(l)
	l.heavy = true
	s.putLocked(&s.heavy, l)
	s.heavyMin = 0
	if s.heavy.n >= heavyKeys {
		m := s.lightestHeavyLocked()
		s.heavyMin = m.count + m.count/8
	}
}

// levelLocked returns the table of level lv, made if need be.
func (s *KeySample) levelLocked(lv int) *table {
	tb := s.levels[lv]
	if tb == nil {
		tb = &table{}
		s.levels[lv] = tb
		s.used |= 1 << lv
		s.account(tb, allocSize(int(unsafe.Sizeof(*tb)), true))
	}
	return tb
}

// lightestHeavyLocked returns the heavy key of the fewest decisions.
func (s *KeySample) lightestHeavyLocked() *keyLog {
	var m *keyLog
	for _, sl := range s.heavy.slots {
		if sl.l != nil && (m == nil || sl.l.count < m.count) {
			m = sl.l
		}
	}
	return m
}

// expireLocked drops l's decisions older than the span before now.
func (s *KeySample) expireLocked(l *keyLog, now int64) {
	cut := now - s.span
	if k := expired(&l.events, cut); k > 0 {
		l.events.pop(k)
		l.count -= int64(k)
		l.popped += k
	}
	k := 0
	for k < l.bucket.n {
		b := l.bucket.at(k)
		if b.t+widths[b.w] > cut {
			break
		}
		l.count -= int64(b.n)
		k++
	}
	if k > 0 {
		l.bucket.pop(k)
		l.popped += k
	}
	if l.wi >= 0 && l.bucket.n == 0 {
		l.wi = -1 // exact again
		l.gen++
		l.popped = 0
	}
}

// append adds a decision at t, after l's last.
func (l *keyLog) append(t, hits int64) {
	l.count++
	if l.wi < 0 {
		if n := l.events.n; n > 0 {
			t = max(t, l.events.at(n-1).t) // concurrent adds may come a little out of order
		}
		l.events.push(event{t, hits})
		return
	}
	l.appendBucket(t, hits, 1, int(l.wi))
}

// align returns the start of the interval of width w holding t.
func align(t, w int64) int64 {
	r := t % w
	if r < 0 {
		r += w
	}
	return t - r
}

// sweepLocked passes the next few slots of the sample's tables, and
// drops the keys there whose last decision is older than the span: keys
// that stopped leave the sample a round of the tables after. (A key still
// deciding expires its own decisions as it adds.) It reads the last
// decision's time from the slot, so that a key is touched only to drop.
func (s *KeySample) sweepLocked(now int64) {
	cut, slots, dropped := now-s.span, sweepSlots, 0
	for slots > 0 {
		tb := s.sweepTableLocked()
		for slots > 0 && s.sweepAt < len(tb.slots) {
			slots--
			sl := &tb.slots[s.sweepAt]
			if sl.l == nil || sl.last >= cut || dropped == sweepKeys {
				s.sweepAt++
				continue
			}
			l := sl.l
			s.expireLocked(l, now)
			dropped++
			if l.count > 0 { // a bucket's interval not yet past
				s.settleLocked(l)
				s.sweepAt++
				continue
			}
			s.removeLocked(l) // another key may take its slot: sweep it again
			if tb.dropped {
				break // it was its level's last key
			}
		}
		if slots > 0 {
			s.nextSweepLocked(tb)
			if tb == &s.heavy {
				return // a round a sweep at most
			}
		}
	}
}

// sweepTableLocked returns the table the sweep is in: a level's, the
// heavy keys' past the last level.
func (s *KeySample) sweepTableLocked() *table {
	if s.sweepLv < s.shift {
		s.sweepLv, s.sweepAt = s.shift, 0
	}
	if s.sweepLv < len(s.levels) {
		if tb := s.levels[s.sweepLv]; tb != nil {
			return tb
		}
		s.nextSweepLocked(nil)
	}
	if s.sweepLv < len(s.levels) {
		return s.levels[s.sweepLv]
	}
	return &s.heavy
}

// nextSweepLocked moves the sweep past table tb (nil: its level has no
// table now) to the next level's, or from the last to the heavy keys',
// or from the heavy keys' back to the first, refreshing once a round the
// count a light key needs to turn heavy as the heavy keys' counts go
// down.
func (s *KeySample) nextSweepLocked(tb *table) {
	s.sweepAt = 0
	if tb == &s.heavy {
		s.sweepLv = s.shift
		s.heavyMin = 0
		if s.heavy.n >= heavyKeys {
			m := s.lightestHeavyLocked()
			s.heavyMin = m.count + m.count/8
		}
		return
	}
	next := s.used >> (s.sweepLv + 1) << (s.sweepLv + 1) // the used levels past this one
	s.sweepLv = len(s.levels)
	if next != 0 {
		s.sweepLv = bits.TrailingZeros64(next)
	}
}

// shrinkLocked brings the sample back under its bound: it halves p while
// the light keys take more than the largest heavy key, and coarsens the
// largest heavy key otherwise.
func (s *KeySample) shrinkLocked(now int64) {
	for s.bytes > s.bound {
		x, big := s.largestHeavyLocked()
		if s.light > 0 && s.shift < len(s.levels) && (x == nil || s.light >= x.bytes()) {
			s.dropLevelLocked()
			continue
		}
		if x != nil && s.coarsenLocked(x, now) {
			continue
		}
		if big == nil {
			return // an empty sample: the bound is below its own size
		}
		s.removeLocked(big) // each heavy key as coarse as it gets, and over: a bound too small
	}
}

// largestHeavyLocked returns the heavy key of the most bytes that can be
// coarsened further, and the heavy key of the most bytes.
func (s *KeySample) largestHeavyLocked() (x, big *keyLog) {
	for _, sl := range s.heavy.slots {
		l := sl.l
		if l == nil {
			continue
		}
		if big == nil || l.logBytes > big.logBytes {
			big = l
		}
		if l.records() >= 2 && int(l.wi) < len(widths)-1 && (x == nil || l.logBytes > x.logBytes) {
			x = l
		}
	}
	return x, big
}

// dropLevelLocked halves p, dropping the light keys of the lowest level.
func (s *KeySample) dropLevelLocked() {
	if tb := s.levels[s.shift]; tb != nil {
		tb.dropped = true
		s.account(tb, -tb.bytes)
		s.levels[s.shift] = nil
		s.used &^= 1 << s.shift
	}
	s.shift++
}

// coarsenLocked merges l's records into buckets of the narrowest width
// that leaves them at most half the bytes they take, or the widest, and
// reports whether l shrank.
func (s *KeySample) coarsenLocked(l *keyLog, now int64) bool {
	var first, last int64
	var recBytes int
	if l.wi < 0 {
		first, last = l.events.at(0).t, l.events.at(l.events.n-1).t
		recBytes = l.events.bytes
	} else {
		b := l.bucket.at(l.bucket.n - 1)
		first, last = l.bucket.at(0).t, b.t+widths[b.w]
		recBytes = l.bucket.bytes
	}
	extent := max(last-first, 0)
	wi := int(l.wi) + 1
	for wi < len(widths)-1 && allocSize(int(extent/widths[wi]+2)*int(unsafe.Sizeof(bucket{})), false) > recBytes/2 {
		wi++
	}
	before := l.logBytes
	l.coarsen(wi)
	s.settleLocked(l)
	return l.logBytes < before
}

// coarsen rewrites l's records as buckets of widths[wi], wider than its
// own.
func (l *keyLog) coarsen(wi int) {
	w := widths[wi]
	l.gen++
	l.popped = 0
	if l.wi < 0 {
		for i := range l.events.n {
			e := l.events.at(i)
			l.appendBucket(e.t, e.hits, 1, wi)
		}
		l.events.pop(l.events.n)
		l.wi = int8(wi)
		return
	}
	// In place: the write index never passes the read index. A bucket
	// merges into the one before if it starts before that one's new end
	// (they are in order, and each width divides the next).
	out, end := 0, int64(math.MinInt64)
	for i := range l.bucket.n {
		b := *l.bucket.at(i)
		if out > 0 {
			c := l.bucket.at(out - 1)
			if b.t < end && uint64(c.n)+uint64(b.n) <= math.MaxUint32 {
				c.n += b.n
				c.hits += b.hits
				continue
			}
			if b.t < end { // c is full: b starts another bucket of c's interval
				*l.bucket.at(out) = bucket{t: c.t, hits: b.hits, n: b.n, w: uint8(wi)}
				out++
				continue
			}
		}
		a := align(b.t, w)
		*l.bucket.at(out) = bucket{t: a, hits: b.hits, n: b.n, w: uint8(wi)}
		out++
		end = a + w
	}
	l.bucket.truncate(out)
	l.wi = int8(wi)
}

// appendBucket merges n decisions of hits at t into l's last bucket if t
// is before its end, or starts a bucket of widths[wi] holding t, or at the
// last's start if t is earlier (decisions a little out of order).
func (l *keyLog) appendBucket(t, hits int64, n uint32, wi int) {
	a := int64(math.MinInt64)
	if k := l.bucket.n; k > 0 {
		b := l.bucket.at(k - 1)
		if t < b.t+widths[b.w] {
			if uint64(b.n)+uint64(n) <= math.MaxUint32 {
				b.n += n
				b.hits += hits
				return
			}
			a = b.t // b is full: another bucket of its interval
		}
		a = max(a, b.t)
	}
	l.bucket.push(bucket{t: max(a, align(t, widths[wi])), hits: hits, n: n, w: uint8(wi)})
}

// bytes is what l takes on the heap, its table's slot aside, as last
// settled.
func (l *keyLog) bytes() int { return keyLogBytes + allocSize(len(l.id), false) + l.logBytes }

var keyLogBytes = allocSize(int(unsafe.Sizeof(keyLog{})), true)

// chunkLen is the elements of a deque's chunk: 4 KiB of events, 6 KiB of
// buckets, both size classes of the allocator.
const chunkLen = 256

// deque is a queue in chunks of chunkLen elements: it grows by a chunk,
// never copying, and frees each chunk as it empties, so that no queue
// however long allocates or copies more than a chunk at a time. A queue
// of fewer elements has one shorter chunk, grown by doubling.
type deque[T any] struct {
	chunks [][]T // each chunk's len is its cap; all are chunkLen long but a lone first one
	head   int   // the first element's index in chunks[0]
	n      int
	bytes  int // its chunks' and its list's, as the allocator takes them
}

func (d *deque[T]) at(i int) *T {
	j := d.head + i
	return &d.chunks[j/chunkLen][j%chunkLen]
}

// push appends v: O(1) amortised, and a chunk of chunkLen at most
// allocated or copied.
func (d *deque[T]) push(v T) {
	j := d.head + d.n
	switch {
	case len(d.chunks) == 0:
		d.setFirst(2)
	case len(d.chunks) == 1 && len(d.chunks[0]) < chunkLen && j == len(d.chunks[0]):
		d.setFirst(2 * d.n) // grow the lone short chunk, its elements to its front
	case j == len(d.chunks)*chunkLen:
		d.bytes -= allocSize(cap(d.chunks)*int(unsafe.Sizeof(d.chunks[0])), true)
		d.chunks = append(d.chunks, make([]T, chunkLen))
		d.bytes += allocSize(cap(d.chunks)*int(unsafe.Sizeof(d.chunks[0])), true) + chunkLen*int(unsafe.Sizeof(v))
	}
	d.n++
	*d.at(d.n - 1) = v
}

// setFirst moves the elements of a deque of one chunk or none to the
// front of a new lone chunk of at least c (> n) elements, at most chunkLen.
func (d *deque[T]) setFirst(c int) {
	c = min(c, chunkLen)
	buf := slices.Grow([]T(nil), c)
	buf = buf[:min(cap(buf), chunkLen)]
	if d.n > 0 {
		copy(buf, d.chunks[0][d.head:d.head+d.n])
	}
	d.free()
	d.chunks = append(d.chunks, buf)
	d.bytes = allocSize(cap(d.chunks)*int(unsafe.Sizeof(d.chunks[0])), true) + allocSize(len(buf)*int(unsafe.Sizeof(buf[0])), false)
}

// free drops every chunk.
func (d *deque[T]) free() {
	d.chunks, d.head, d.bytes = nil, 0, 0
}

// pop drops the first k elements, freeing the chunks they leave empty,
// and shortening a lone chunk once a quarter full.
func (d *deque[T]) pop(k int) {
	d.head += k
	d.n -= k
	switch {
	case d.n == 0:
		d.free()
		d.n = 0
		return
	case d.head >= chunkLen:
		drop := d.head / chunkLen
		copy(d.chunks, d.chunks[drop:])
		clear(d.chunks[len(d.chunks)-drop:])
		d.chunks = d.chunks[:len(d.chunks)-drop]
		d.head -= drop * chunkLen
		d.bytes -= drop * chunkLen * int(unsafe.Sizeof(*new(T)))
	}
	if len(d.chunks) == 1 && len(d.chunks[0]) > 4 && d.n <= len(d.chunks[0])/4 {
		d.setFirst(2 * d.n)
	}
}

// truncate keeps the first n elements, freeing the chunks past them.
func (d *deque[T]) truncate(n int) {
	if n == 0 {
		d.free()
		d.n = 0
		return
	}
	d.n = n
	keep := (d.head+n-1)/chunkLen + 1
	if drop := len(d.chunks) - keep; drop > 0 {
		clear(d.chunks[keep:])
		d.chunks = d.chunks[:keep]
		d.bytes -= drop * chunkLen * int(unsafe.Sizeof(*new(T)))
	}
	if len(d.chunks) == 1 && len(d.chunks[0]) > 4 && d.n <= len(d.chunks[0])/4 {
		d.setFirst(2 * d.n)
	}
}

// expired returns how many of the first events are older than cut: a
// galloping search, O(log k) for k expired.
func expired(r *deque[event], cut int64) int {
	if r.n == 0 || r.at(0).t >= cut {
		return 0
	}
	lo, hi := 0, 1 // r.at(lo) is old; r.at(hi) is not, or hi == n, once the gallop stops
	for hi < r.n && r.at(hi).t < cut {
		lo, hi = hi, 2*hi
	}
	hi = min(hi, r.n)
	for hi-lo > 1 {
		if mid := int(uint(lo+hi) / 2); r.at(mid).t < cut {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// table is a set of keys by hash: open addressing, linear probing, at
// most three quarters full.
type table struct {
	slots   []slot // a power of two
	n       int
	bytes   int  // its own, its slots' and its keys'
	dropped bool // p dropped its keys
}

// slot is a key in a table: its hash, its last decision's time (for the
// sweep, which then reads no key but those it drops), and its log.
type slot struct {
	h    uint64
	last int64
	l    *keyLog
}

// find returns the slot of the key of hash h, or nil. The slot moves when
// the table changes.
func (tb *table) find(h uint64) *slot {
	if len(tb.slots) == 0 {
		return nil
	}
	m := uint64(len(tb.slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		sl := &tb.slots[i]
		if sl.l == nil {
			return nil
		}
		if sl.h == h {
			return sl
		}
	}
}

// put adds sl, not in tb, and returns the change of its slots' bytes.
func (tb *table) put(sl slot) int {
	d := 0
	if (tb.n+1)*4 > len(tb.slots)*3 {
		d = tb.resize(max(8, 2*len(tb.slots)))
	}
	tb.insert(sl)
	tb.n++
	return d
}

func (tb *table) insert(sl slot) {
	m := uint64(len(tb.slots) - 1)
	i := sl.h & m
	for tb.slots[i].l != nil {
		i = (i + 1) & m
	}
	tb.slots[i] = sl
}

// del removes the key of hash h, in tb, shifting back the keys after it
// that probed past its slot, and returns the change of its slots' bytes.
func (tb *table) del(h uint64) int {
	m := uint64(len(tb.slots) - 1)
	i := h & m
	for tb.slots[i].l == nil || tb.slots[i].h != h {
		i = (i + 1) & m
	}
	for j := (i + 1) & m; tb.slots[j].l != nil; j = (j + 1) & m {
		home := tb.slots[j].h & m
		// The key at j may move to i unless its home lies in (i, j].
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			tb.slots[i] = tb.slots[j]
			i = j
		}
	}
	tb.slots[i] = slot{}
	tb.n--
	if len(tb.slots) > 8 && tb.n*8 < len(tb.slots) {
		return tb.resize(len(tb.slots) / 2)
	}
	return 0
}

func (tb *table) resize(n int) int {
	old := tb.slots
	tb.slots = make([]slot, n)
	for _, sl := range old {
		if sl.l != nil {
			tb.insert(sl)
		}
	}
	return slotsBytes(n) - slotsBytes(len(old))
}

func slotsBytes(n int) int { return allocSize(n*int(unsafe.Sizeof(slot{})), true) }

// sizeClasses are the allocator's size classes of small objects
// (internal/runtime/gc/sizeclasses.go), checked by a test.
var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048,
	2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880,
	12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocSize returns the bytes the allocator takes for an object of n
// bytes; ptrs if it holds pointers (then past 512 bytes it carries an
// 8-byte header).
func allocSize(n int, ptrs bool) int {
	if n == 0 {
		return 0
	}
	if ptrs && n > 512 && n <= 32768-8 {
		n += 8
	}
	if n <= 32768 {
		i, _ := slices.BinarySearch(sizeClasses[:], n)
		return sizeClasses[i]
	}
	return (n + 8191) &^ 8191
}

// Tried is what a proposed policy would have done to the sampled traffic.
type Tried struct {
	// Rate is the share of light keys sampled (p); Keys and Events what
	// the sample holds (of the last span, since the time asked), Heavy
	// the keys held whatever p.
	Rate   float64 `json:"rate"`
	Keys   int     `json:"keys"`
	Heavy  int     `json:"heavyKeys"`
	Events int     `json:"events"`
	// Coarse is how many of Events were replayed from coarsened keys'
	// buckets, spread evenly over their intervals, and Interval the
	// widest of those intervals in seconds: the error of their replay
	// (KeySample) comes on top of StdErr. The rest replay exactly.
	Coarse   int     `json:"coarse"`
	Interval float64 `json:"interval"`
	// Bytes is the sample's size, at most its Bound.
	Bytes int `json:"bytes"`
	Bound int `json:"bound"`
	// Denied is the estimated decisions the policy would have denied over
	// all keys, and StdErr that estimate's standard error; DeniedSampled
	// the sample's own.
	Denied        float64 `json:"denied"`
	StdErr        float64 `json:"stdErr"`
	DeniedSampled int64   `json:"deniedSampled"`
	// Who are the sampled keys it would have denied most, most first.
	Who []KeyCount `json:"who"`
}

// tryChunk is how many records Try copies under the lock at a time.
const tryChunk = 256

// Try replays p on the sampled decisions since from (each key's in order,
// through the algorithm as a store would decide them), only those of
// tenant if not empty, and estimates what it would have denied. It holds
// the sample's lock to list the keys, then for tryChunk records at a
// time, never while it replays or allocates.
func (s *KeySample) Try(p *sluice.Policy, tenant string, from time.Time, top int) Tried {
	s.mu.Lock()
	var logs []*keyLog
	for _, tb := range s.levels[s.shift:] {
		if tb != nil {
			logs = tb.appendKeys(logs)
		}
	}
	logs = s.heavy.appendKeys(logs)
	s.mu.Unlock()

	type result struct {
		l      *keyLog
		heavy  bool
		denied int64
	}
	var (
		res     []result
		events  []event
		buckets []bucket
		c       = new(tryCopy)
		out     = Tried{Who: []KeyCount{}}
		f       = from.UnixNano()
	)
	for _, l := range logs {
		if tenant != "" && l.tenant() != tenant {
			continue
		}
		var heavy, ok bool
		events, buckets, heavy, ok = s.copySince(l, f, c, events[:0], buckets[:0])
		if !ok {
			continue
		}
		r := replay(p, buckets, events, f)
		if r.n == 0 {
			continue
		}
		out.Events += int(r.n)
		out.Coarse += int(r.coarse)
		out.Interval = max(out.Interval, time.Duration(r.width).Seconds())
		res = append(res, result{l, heavy, r.denied})
	}
	s.mu.Lock()
	shift := s.shift
	out.Bytes, out.Bound = s.bytes, s.bound
	s.mu.Unlock()

	rate := math.Ldexp(1, -shift)
	out.Rate = rate
	var lightSq float64
	for _, r := range res {
		if !r.heavy && level(r.l.hash) < shift {
			continue // dropped while Try ran: not in the sample of rate p
		}
		out.Keys++
		out.DeniedSampled += r.denied
		if r.heavy {
			out.Heavy++
			out.Denied += float64(r.denied)
		} else {
			out.Denied += float64(r.denied) / rate
			lightSq += float64(r.denied) * float64(r.denied)
		}
		if r.denied > 0 {
			out.Who = append(out.Who, KeyCount{Tenant: r.l.tenant(), Key: r.l.key(), Count: r.denied})
		}
	}
	// A light key is in the sample with probability p, independently (by
	// its hash): the variance of its part is (1-p)/p^2 times the sum of
	// the sampled light keys' squared denials.
	out.StdErr = math.Sqrt((1 - rate) / (rate * rate) * lightSq)
	slices.SortFunc(out.Who, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	out.Who = out.Who[:min(len(out.Who), max(top, 0))]
	return out
}

// appendKeys appends tb's keys to dst.
func (tb *table) appendKeys(dst []*keyLog) []*keyLog {
	for _, sl := range tb.slots {
		if sl.l != nil {
			dst = append(dst, sl.l)
		}
	}
	return dst
}

// tryCopy is where Try copies a chunk of a key's records under the lock,
// to append them to its own copy after: nothing allocates under the lock.
type tryCopy struct {
	events  [tryChunk]event
	buckets [tryChunk]bucket
}

// copySince appends l's records since from to events and buckets,
// tryChunk at a time under the lock, starting again if the key is
// coarsened meanwhile; ok is false if l left the sample.
func (s *KeySample) copySince(l *keyLog, from int64, c *tryCopy, events []event, buckets []bucket) (_ []event, _ []bucket, heavy, ok bool) {
	gen, next := -1, 0 // next: the record to copy, counted from the last rewrite
	for {
		s.mu.Lock()
		if !l.live() {
			s.mu.Unlock()
			return events, buckets, false, false
		}
		if l.gen != gen {
			gen, events, buckets = l.gen, events[:0], buckets[:0]
			next = l.popped + l.firstSince(from)
		}
		i := max(next-l.popped, 0) // records expired meanwhile are skipped
		end := min(i+tryChunk, l.records())
		ne, nb := 0, 0
		for ; i < end; i++ {
			if l.wi < 0 {
				c.events[ne] = *l.events.at(i)
				ne++
			} else {
				c.buckets[nb] = *l.bucket.at(i)
				nb++
			}
		}
		next = l.popped + end
		done := end == l.records()
		heavy = l.heavy
		s.mu.Unlock()
		events, buckets = append(events, c.events[:ne]...), append(buckets, c.buckets[:nb]...)
		if done {
			return events, buckets, heavy, true
		}
	}
}

// firstSince returns the index of l's first record with a decision at or
// after from.
func (l *keyLog) firstSince(from int64) int {
	if l.wi < 0 {
		return sortSearch(l.events.n, func(i int) bool { return l.events.at(i).t >= from })
	}
	return sortSearch(l.bucket.n, func(i int) bool { b := l.bucket.at(i); return b.t+widths[b.w] > from })
}

// sortSearch is sort.Search.
func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		if mid := int(uint(lo+hi) / 2); !f(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

type replayed struct {
	n, coarse, denied int64
	width             int64 // the widest bucket's
}

// replay runs p over a key's decisions since from, in order: its
// buckets', each spread evenly over its interval with the bucket's hits
// spread evenly over them, then its events.
func replay(p *sluice.Policy, buckets []bucket, events []event, from int64) replayed {
	var (
		st algo.State
		d  sluice.Decision
		r  replayed
	)
	for _, b := range buckets {
		w, n := widths[b.w], int64(b.n)
		q, rem := b.hits/n, b.hits%n
		step := float64(w) / float64(n)
		var acc int64
		for i := range n {
			h := q
			if acc += rem; acc >= n {
				acc -= n
				h++
			}
			t := b.t + int64((float64(i)+0.5)*step)
			if t < from {
				continue
			}
			r.n++
			r.coarse++
			r.width = max(r.width, w)
			if algo.Update(p, &st, t, h, &d); !d.Allowed {
				r.denied++
			}
		}
	}
	for _, e := range events {
		if e.t < from {
			continue
		}
		r.n++
		if algo.Update(p, &st, e.t, e.hits, &d); !d.Allowed {
			r.denied++
		}
	}
	return r
}
