package insight

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// HistoryOptions bound a Recorder's history: its counts per minute, by
// tenant and by policy, kept longer than the hour of seconds and, with a
// Path, across restarts. Zero fields take the defaults.
type HistoryOptions struct {
	// Minutes is how many minutes each tenant and policy keeps (default
	// 1440: a day); a minute older than that before the latest folded is
	// dropped.
	Minutes int
	// Tenants bounds the tenants with a history of their own (default
	// 500); Policies the policies tenants invent (inline checks) with one,
	// over all tenants (default 300), and TenantPolicies those of one
	// tenant over the span (default: the Recorder's TenantPolicies, 16). Past them a label's minutes
	// count under Other. A configured policy (RecorderOptions.Configured)
	// always has its row, and is not counted: the configuration bounds
	// them. A label without a count in the last Minutes gives its place
	// up.
	Tenants        int
	Policies       int
	TenantPolicies int
	// Path is the file the history is kept in, written every SaveEvery
	// (KeepHistory) and read at the start (LoadHistory). Empty: in
	// memory only, gone at a restart.
	Path string
	// SaveEvery is how often the file is written, the minute in progress
	// included: what a crash (kill -9) may forget (default, and at most,
	// a minute).
	SaveEvery time.Duration
}

// foldGrace is how long after a minute ends it is folded: decisions of
// its last second still being counted land first.
const foldGrace = 2 * time.Second

// History is the Recorder's counts per minute. The decisions never touch
// it: once a minute (FoldHistory) the minutes just ended are summed from
// the Recorder's seconds, so that its cost is one pass over the labels a
// minute, whatever the traffic.
type history struct {
	o      HistoryOptions
	mu     sync.Mutex
	folded int64                  // the latest minute folded (unix seconds / 60); 0: none
	rows   [2]map[string]*minutes // tenants, policies
	saved  bool                   // the last save succeeded (for logging a change only)

	// The invented policies' rows: each one's tenants, charged a place
	// each (of TenantPolicies) while it has a row. A policy row not in
	// inv is reserved: a configured policy's, or Other.
	inv     map[string][]string
	charged map[string]int
}

// owner is whom a policy's minutes are for: a configured policy (and
// Other) is reserved, always with its row; an invented one is of the
// tenants holding it, each within its bound.
type owner struct {
	reserved bool
	tenants  []string
}

const (
	histTenants = iota
	histPolicies
)

// minutes is one label's counts per minute, oldest first, only the
// minutes with a count.
type minutes []minuteCounts

type minuteCounts struct {
	minute int64
	n      [Kinds]int32
}

func newHistory(o HistoryOptions) *history {
	if o.Minutes <= 0 {
		o.Minutes = 1440
	}
	if o.Tenants <= 0 {
		o.Tenants = 500
	}
	if o.Policies <= 0 {
		o.Policies = 300
	}
	if o.TenantPolicies <= 0 {
		o.TenantPolicies = 16
	}
	if o.SaveEvery <= 0 || o.SaveEvery > time.Minute {
		o.SaveEvery = time.Minute
	}
	return &history{o: o, saved: true, rows: [2]map[string]*minutes{{}, {}}, inv: map[string][]string{}, charged: map[string]int{}}
}

// addLocked adds n to label's minute: under Other past the bound on
// labels. A policy's is for o. h.mu is held.
func (h *history) addLocked(which int, label string, minute int64, n *[Kinds]int32, o owner) {
	rows := h.rows[which]
	m := rows[label]
	switch {
	case which == histTenants:
		if m == nil && label != Other && len(rows)-b2i(rows[Other] != nil) >= h.o.Tenants {
			label, m = Other, rows[Other]
		}
	case label == Other || o.reserved:
		if _, ok := h.inv[label]; ok {
			h.releaseLocked(label) // configured by a reload
		}
	case !h.chargeLocked(label, m != nil, o.tenants):
		label, m = Other, rows[Other]
	}
	if m == nil {
		m = &minutes{}
		rows[label] = m
	}
	i, found := slices.BinarySearchFunc(*m, minute, func(c minuteCounts, t int64) int { return int(c.minute - t) })
	if !found {
		*m = slices.Insert(*m, i, minuteCounts{minute: minute})
	}
	for k := range n {
		(*m)[i].n[k] += n[k]
	}
}

// chargeLocked reports whether an invented policy has a row, made if
// its tenants have room: each tenant holding it is charged a place, up
// to TenantPolicies, and the rows invented up to Policies. h.mu is held.
func (h *history) chargeLocked(label string, exists bool, tenants []string) bool {
	owners, invented := h.inv[label]
	if exists && !invented {
		return true // a configured policy's before a reload: it gives its place up once idle
	}
	if !exists && len(h.inv) >= h.o.Policies {
		return false
	}
	for _, t := range tenants {
		if h.charged[t] < h.o.TenantPolicies && !slices.Contains(owners, t) {
			owners = append(owners, t)
			h.charged[t]++
		}
	}
	if len(owners) == 0 {
		return false
	}
	h.inv[label] = owners
	return true
}

// releaseLocked gives an invented policy's places back to its tenants.
// h.mu is held.
func (h *history) releaseLocked(label string) {
	for _, t := range h.inv[label] {
		if h.charged[t]--; h.charged[t] <= 0 {
			delete(h.charged, t)
		}
	}
	delete(h.inv, label)
}

// pruneLocked drops the minutes older than the span before newest, and
// the labels left without any. h.mu is held.
func (h *history) pruneLocked(newest int64) {
	oldest := newest - int64(h.o.Minutes) + 1
	for which, rows := range h.rows {
		for label, m := range rows {
			i, _ := slices.BinarySearchFunc(*m, oldest, func(c minuteCounts, t int64) int { return int(c.minute - t) })
			if i == len(*m) {
				delete(rows, label)
				if which == histPolicies {
					h.releaseLocked(label)
				}
				continue
			}
			if i > 0 {
				*m = slices.Delete(*m, 0, i)
			}
		}
	}
}

// FoldHistory folds the minutes ended by now (foldGrace ago), and not yet
// folded, from the Recorder's seconds into its history. KeepHistory calls
// it once a minute; a test calls it with its clock.
func (r *Recorder) FoldHistory(now time.Time) {
	h := r.hist
	upTo := now.Add(-foldGrace).Unix()/60 - 1
	h.mu.Lock()
	defer h.mu.Unlock()
	// Taken under h.mu: a tenant forgotten meanwhile (Forget drops its
	// sketches, then its rows) is not folded back.
	owners := r.policyOwners()
	from := max(h.folded+1, upTo-int64(r.span/time.Minute)+1)
	for m := from; m <= upTo; m++ {
		r.foldInto(h, m, owners)
	}
	if upTo > h.folded {
		h.folded = upTo
		h.pruneLocked(upTo)
	}
}

// foldInto adds minute m of the Recorder's seconds into h, the
// policies' for their owners (policyOwners). h.mu is held, or h is the
// caller's own.
func (r *Recorder) foldInto(h *history, m int64, owners func(string) owner) {
	for which, s := range [2]*Series{r.tenants, r.policies} {
		for _, label := range s.Labels() {
			if n, ok := minuteOf(s, label, m); ok {
				h.addLocked(which, label, m, &n, owners(label))
			}
		}
	}
}

// policyOwners returns whom each policy's minutes are for: a configured
// policy (the Recorder's Configured, as of now: a reload changes it)
// and Other reserved; an invented one the tenants with its sketches,
// which the Recorder bounds. It takes r.mu, once a fold.
func (r *Recorder) policyOwners() func(string) owner {
	r.mu.Lock()
	m := make(map[string]owner, len(r.sketch))
	for id := range r.sketch {
		o := m[id.policy]
		if id.invented() {
			o.tenants = append(o.tenants, id.tenant)
		} else {
			o.reserved = true
		}
		m[id.policy] = o
	}
	r.mu.Unlock()
	for _, o := range m {
		slices.Sort(o.tenants)
	}
	return func(policy string) owner {
		o := m[policy]
		if r.configured != nil {
			o.reserved = r.configured(policy)
		}
		o.reserved = o.reserved || policy == Other
		return o
	}
}

// minuteOf sums label's seconds of minute m in s; ok is false if all are
// zero.
func minuteOf(s *Series, label string, m int64) (n [Kinds]int32, ok bool) {
	return minuteSince(s, label, m, 0)
}

// minuteSince is minuteOf of the seconds from since on.
func minuteSince(s *Series, label string, m, since int64) (n [Kinds]int32, ok bool) {
	var sum [Kinds]int64
	s.Sum(label, max(m*60, since), m*60+59, sum[:])
	for k, c := range sum {
		n[k] = int32(min(c, 1<<31-1))
		ok = ok || c != 0
	}
	return n, ok
}

// HistoryLabels returns the tenants (or the policies) with a history or
// counts not folded yet.
func (r *Recorder) HistoryLabels(policies bool) []string {
	which, s := r.series(policies)
	h := r.hist
	h.mu.Lock()
	seen := map[string]bool{}
	for l := range h.rows[which] {
		seen[l] = true
	}
	h.mu.Unlock()
	for _, l := range s.Labels() {
		seen[l] = true
	}
	out := make([]string, 0, len(seen))
	for l := range seen {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

func (r *Recorder) series(policies bool) (int, *Series) {
	if policies {
		return histPolicies, r.policies
	}
	return histTenants, r.tenants
}

// Minutes returns a tenant's (or a policy's) counts per minute, of the
// minutes from from to to (unix minutes, inclusive, within the history's
// span before to): those folded from the history, the later ones summed
// from the seconds now. Only minutes with a count are returned, each as a
// Point whose Second is the minute's first.
//
// Nothing counted before since (unix seconds; a tenant's creation) is
// returned: the seconds are summed from since, and a folded minute that
// began before it is left out whole, so that a tenant created again never
// reads the counts of the one before it, at the cost of the first minute
// of its own once folded.
func (r *Recorder) Minutes(label string, policies bool, since, from, to int64) []Point {
	which, s := r.series(policies)
	h := r.hist
	from = max(from, to-int64(h.o.Minutes)+1)
	var out []Point
	h.mu.Lock()
	folded := h.folded
	if m := h.rows[which][label]; m != nil {
		i, _ := slices.BinarySearchFunc(*m, max(from, (since+59)/60), func(c minuteCounts, t int64) int { return int(c.minute - t) })
		for _, c := range (*m)[i:] {
			if c.minute > to {
				break
			}
			out = append(out, Point{Second: c.minute * 60, Counts: slices.Clone(c.n[:])})
		}
	}
	h.mu.Unlock()
	// A minute read from the file at a restart may not be folded yet:
	// its seconds since add to it.
	loaded := len(out)
	for m := max(from, folded+1); m <= to; m++ {
		n, ok := minuteSince(s, label, m, since)
		if !ok {
			continue
		}
		if i, found := slices.BinarySearchFunc(out[:loaded], m*60, func(p Point, t int64) int { return int(p.Second - t) }); found {
			for k := range n {
				out[i].Counts[k] += n[k]
			}
			continue
		}
		out = append(out, Point{Second: m * 60, Counts: slices.Clone(n[:])})
	}
	slices.SortFunc(out, func(a, b Point) int { return int(a.Second - b.Second) })
	return out
}

// HistorySpan returns how many minutes the history keeps, and whether it
// is kept in a file across restarts.
func (r *Recorder) HistorySpan() (minutes int, kept bool) {
	return r.hist.o.Minutes, r.hist.o.Path != ""
}

// forget drops a tenant's minutes, and its invented policies' that no
// other tenant holds.
func (h *history) forget(tenant string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.rows[histTenants], tenant)
	delete(h.charged, tenant)
	for label, owners := range h.inv {
		if i := slices.Index(owners, tenant); i >= 0 {
			if owners = slices.Delete(owners, i, i+1); len(owners) > 0 {
				h.inv[label] = owners
				continue
			}
			delete(h.inv, label)
			delete(h.rows[histPolicies], label)
		}
	}
}

// ownerLocked is whom label's minutes in h are for: its tenants if an
// invented policy's. h.mu is held.
func (h *history) ownerLocked(which int, label string) owner {
	owners, invented := h.inv[label]
	return owner{reserved: which == histPolicies && !invented, tenants: owners}
}

// The history's file: a header, then each label's minutes as varints (a
// policy's after its tenants if invented), then a CRC-32 of all that. Written whole to a temporary file, synced,
// and renamed over the last: a crash leaves the last file or the new one.
const (
	historyMagic   = "sluice-insight-history-2\n"
	historyMagicV1 = "sluice-insight-history-1\n" // read: no policy's tenants
)

// SaveHistory writes the history to its file (HistoryOptions.Path), with
// the minutes not folded yet summed from the seconds: what a restart then
// reads. Without a Path it does nothing.
func (r *Recorder) SaveHistory(now time.Time) error {
	h := r.hist
	if h.o.Path == "" {
		return nil
	}
	snap := newHistory(h.o)
	h.mu.Lock()
	snap.folded = h.folded
	for which, rows := range h.rows {
		for label, m := range rows {
			c := slices.Clone(*m)
			snap.rows[which][label] = &c
		}
	}
	for label, owners := range h.inv {
		snap.inv[label] = slices.Clone(owners)
	}
	maps.Copy(snap.charged, h.charged)
	h.mu.Unlock()
	// The minutes since the last fold, up to now's, as far as they are
	// counted: a restart adds its own seconds of them to these.
	owners := r.policyOwners()
	for m := snap.folded + 1; m <= now.Unix()/60; m++ {
		r.foldInto(snap, m, owners)
	}
	return snap.write()
}

func (h *history) write() error {
	var buf bytes.Buffer
	buf.WriteString(historyMagic)
	var tmp [binary.MaxVarintLen64]byte
	uv := func(v uint64) { buf.Write(binary.AppendUvarint(tmp[:0], v)) }
	uv(uint64(Kinds))
	uv(uint64(h.folded))
	str := func(s string) {
		uv(uint64(len(s)))
		buf.WriteString(s)
	}
	for which, rows := range h.rows {
		uv(uint64(len(rows)))
		labels := make([]string, 0, len(rows))
		for l := range rows {
			labels = append(labels, l)
		}
		slices.Sort(labels)
		for _, label := range labels {
			m := *rows[label]
			str(label)
			if which == histPolicies {
				owners := h.inv[label]
				uv(uint64(len(owners)))
				for _, t := range owners {
					str(t)
				}
			}
			uv(uint64(len(m)))
			prev := int64(0)
			for _, c := range m {
				uv(uint64(c.minute - prev))
				prev = c.minute
				for _, n := range c.n {
					uv(uint64(uint32(n)))
				}
			}
		}
	}
	buf.Write(binary.BigEndian.AppendUint32(tmp[:0], crc32.ChecksumIEEE(buf.Bytes())))
	return writeFileAtomic(h.o.Path, buf.Bytes())
}

func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone once renamed
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadHistory reads the history's file, if there is one, adding its
// minutes to what the Recorder holds, within its bounds. A file that is
// missing is no history; one that is damaged is an error, and nothing of
// it is read.
func (r *Recorder) LoadHistory() error {
	h := r.hist
	if h.o.Path == "" {
		return nil
	}
	b, err := os.ReadFile(h.o.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("insight history: %w", err)
	}
	loaded, err := decodeHistory(b, h.o)
	if err != nil {
		return fmt.Errorf("insight history %s: %w", h.o.Path, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.folded = max(h.folded, loaded.folded)
	for which, rows := range loaded.rows {
		for label, m := range rows {
			o := loaded.ownerLocked(which, label)
			for i := range *m {
				h.addLocked(which, label, (*m)[i].minute, &(*m)[i].n, o)
			}
		}
	}
	// Minutes past the span before now are dropped at the next fold.
	return nil
}

var errHistoryDamaged = errors.New("damaged: not a history file, or cut short")

func decodeHistory(b []byte, o HistoryOptions) (*history, error) {
	if len(b) < len(historyMagic)+4 {
		return nil, errHistoryDamaged
	}
	v1 := string(b[:len(historyMagicV1)]) == historyMagicV1
	if !v1 && string(b[:len(historyMagic)]) != historyMagic {
		return nil, errHistoryDamaged
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, errHistoryDamaged
	}
	rd := bufio.NewReader(bytes.NewReader(body[len(historyMagic):]))
	var bad error
	uv := func() uint64 {
		v, err := binary.ReadUvarint(rd)
		if err != nil && bad == nil {
			bad = errHistoryDamaged
		}
		return v
	}
	if k := uv(); k != uint64(Kinds) {
		return nil, fmt.Errorf("counts %d kinds, this version %d", k, Kinds)
	}
	h := newHistory(o)
	h.folded = int64(uv())
	for which := range h.rows {
		labels := uv()
		for range labels {
			if bad != nil {
				return nil, bad
			}
			label, err := readString(rd, uv)
			if err != nil {
				return nil, err
			}
			own := owner{reserved: which == histPolicies}
			if which == histPolicies && !v1 {
				n := uv()
				if n > 1<<16 {
					return nil, errHistoryDamaged
				}
				for range n {
					t, err := readString(rd, uv)
					if err != nil {
						return nil, err
					}
					own.tenants = append(own.tenants, t)
				}
				own.reserved = n == 0
			}
			count := uv()
			if count > uint64(o.Minutes)+2 && count > 1<<20 {
				return nil, errHistoryDamaged
			}
			minute := int64(0)
			for range count {
				minute += int64(uv())
				var n [Kinds]int32
				for k := range n {
					n[k] = int32(uint32(uv()))
				}
				if bad != nil {
					return nil, bad
				}
				h.addLocked(which, label, minute, &n, own)
			}
		}
	}
	if bad != nil {
		return nil, bad
	}
	return h, nil
}

func readString(rd io.Reader, uv func() uint64) (string, error) {
	l := uv()
	if l > 1<<16 {
		return "", errHistoryDamaged
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(rd, b); err != nil {
		return "", errHistoryDamaged
	}
	return string(b), nil
}

// KeepHistory folds the minutes as they end and, with a Path, writes the
// file, once a minute (2 seconds into the next) and every SaveEvery if
// that is sooner, until ctx is done; then
// folds and writes once more. It logs nothing: a failed write is returned
// to onErr (nil: ignored), which is told again when writing works again.
func (r *Recorder) KeepHistory(ctx context.Context, onErr func(error)) {
	h := r.hist
	save := func() {
		now := r.now()
		r.FoldHistory(now)
		err := r.SaveHistory(now)
		h.mu.Lock()
		changed := h.saved != (err == nil)
		h.saved = err == nil
		h.mu.Unlock()
		if changed && onErr != nil {
			onErr(err)
		}
	}
	for {
		// The next minute's fold, or the next save if it comes first.
		now := r.now()
		next := now.Truncate(time.Minute).Add(time.Minute + foldGrace)
		if every := h.o.SaveEvery; every < time.Minute && next.Sub(now) > every {
			next = now.Add(every)
		}
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			save()
			return
		case <-t.C:
			save()
		}
	}
}
