package fairshare

// fairQueue orders flows (groups among groups, or one group's customers
// among themselves) by start-time fair queuing (SFQ, Goyal, Vin and Cheng
// 1996): each flow with a request waiting has a start tag, the virtual
// time at which its next request is due, and the flow of least start tag
// goes next. Releasing n cost units of a flow of weight w moves its tag
// on by n/w, so over any span in which flows wait, each is released cost
// units in proportion to its weight, whatever its requests cost; and a
// costly request goes on its flow's turn, not after the flow has saved up
// for it over several rounds, as in deficit round robin.
//
// A flow that joins takes a start tag of the later of its own last finish
// tag and the virtual time (v: the latest start tag released, less its
// lane) less a
// bounded credit: a flow that had less than its share since it last
// waited starts ahead of every flow waiting (they all have tags of at
// least about v), so a light customer waits about one release, and may
// send up to credit times its weight in cost units so, if it had that
// much less than its share; one that had more starts where its releases
// took it, so it gains nothing by letting its queue drain and coming back.
// Among equal tags, a flow that owes nothing (fresh) goes first, as
// FQ-CoDel serves new flows first, then the earliest to take its tag. A
// flow with a lane (flow.ahead) is ordered as if its start tag were that
// much less.
type fairQueue[T flower] struct {
	v    float64 // the start tag of the latest release
	seq  uint64  // orders flows of equal tags
	busy []T     // flows with a request waiting: a heap by (start-ahead, !fresh, seq)
}

// flow is one flow's place in a fairQueue.
type flow struct {
	start float64 // the start tag of its next request, while it waits
	// ahead is how far past v its start tag may be while it still goes
	// as if at v: a flow is ordered by start-ahead (a light group's lane).
	// Its tags move as without it.
	ahead float64
	// asked is the virtual time a group's asking has reached (Scheduler
	// ask); unused by the fairQueue but for shift.
	asked  float64
	finish float64 // the finish tag of its last release
	fresh  bool    // it joined owing nothing
	seq    uint64
	at     int // its index in busy; -1 while it does not wait
}

// flower is what a fairQueue orders: anything with a flow.
type flower interface{ flow() *flow }

func (q *fairQueue[T]) len() int { return len(q.busy) }

// top returns the flow whose request goes next; q.len() must be > 0.
func (q *fairQueue[T]) top() T { return q.busy[0] }

// credit is how far behind v, in cost units per unit of weight, a flow
// that had less than its share may start: it goes ahead of the flows that
// wait, but gains little over the fluid ideal that fairness is measured
// against. The fluid serves a flow nothing while it has nothing waiting;
// a credit of a whole unit let flows whose requests are refused or
// dropped at short maximum waits make up a missed turn each time they
// came back, ahead of the heaviest, which got a few per cent less than
// their share (docs/benchmarks.md: with waits of 300 ms to 1 s, Jain's
// index 0.986 to 0.990 at a credit of 1, 0.990 to 0.997 at 0.4). A light
// customer's clusters of requests go ahead by its lane instead
// (Scheduler.lane), which moves no tag.
const credit = 0.4

// join adds x, which has just got a request waiting.
func (q *fairQueue[T]) join(x T) {
	f := x.flow()
	f.start = max(q.v-credit, f.finish)
	f.fresh = f.start <= q.v
	q.seq++
	f.seq = q.seq
	q.push(x)
}

// push puts back x after pop, with its tags: passed over (at a Cap)
// meanwhile, it gains no more credit than a flow that joins.
func (q *fairQueue[T]) push(x T) {
	f := x.flow()
	f.start = max(f.start, q.v-credit)
	f.at = len(q.busy)
	q.busy = append(q.busy, x)
	q.up(f.at)
}

// pop removes the top flow, keeping its tags, and returns it.
func (q *fairQueue[T]) pop() T {
	x := q.busy[0]
	q.remove(x)
	return x
}

// remove takes x, which waits, out of the queue; its finish tag stays.
func (q *fairQueue[T]) remove(x T) {
	i := x.flow().at
	last := len(q.busy) - 1
	q.swap(i, last)
	q.busy = q.busy[:last]
	x.flow().at = -1
	if i < last {
		q.down(i)
		q.up(i)
	}
}

// served records the release of units (cost over weight) of x, the top,
// and keeps it in the queue if more of its requests wait. v moves to x's
// place in the order, start less ahead: a release in a light group's
// lane does not move it past the flows waiting.
func (q *fairQueue[T]) served(x T, units float64, more bool) {
	f := x.flow()
	q.v = max(q.v, f.start-f.ahead)
	f.finish = f.start + units
	if !more {
		q.remove(x)
		return
	}
	f.start, f.fresh = f.finish, false
	q.seq++
	f.seq = q.seq
	q.down(f.at)
}

// servedAhead records the release of units of x out of its turn: as
// served, but v stays, so flows that join are not put behind x's tag.
func (q *fairQueue[T]) servedAhead(x T, units float64, more bool) {
	f := x.flow()
	f.finish = f.start + units
	if !more {
		q.remove(x)
		return
	}
	f.start, f.fresh = f.finish, false
	q.down(f.at)
}

// shift moves v and the tags of flows (every flow of q, waiting or not)
// back by v, keeping their order: tags stay small, where float64 tells
// apart the steps of the heaviest weights.
func (q *fairQueue[T]) shift(flows func(yield func(T) bool)) {
	d := q.v
	for x := range flows {
		f := x.flow()
		f.start = max(f.start-d, -credit)
		f.finish = max(f.finish-d, -credit)
		f.asked = max(f.asked-d, -lightDepth)
	}
	q.v = 0
}

// maxTag is the virtual time past which a fairQueue shifts its tags back:
// below it, float64 resolves a step of 1/MaxWeight to within a millionth.
const maxTag = 1 << 20

func (q *fairQueue[T]) less(i, j int) bool {
	return q.lessFlow(q.busy[i].flow(), q.busy[j].flow())
}

// lessFlow reports whether a goes before b.
func (q *fairQueue[T]) lessFlow(a, b *flow) bool {
	if ka, kb := a.start-a.ahead, b.start-b.ahead; ka != kb {
		return ka < kb
	}
	if a.fresh != b.fresh {
		return a.fresh
	}
	return a.seq < b.seq
}

// setAhead sets x's ahead, and its place if it waits.
func (q *fairQueue[T]) setAhead(x T, a float64) {
	f := x.flow()
	if f.ahead == a {
		return
	}
	f.ahead = a
	if f.at >= 0 {
		q.down(f.at)
		q.up(f.at)
	}
}

func (q *fairQueue[T]) swap(i, j int) {
	q.busy[i], q.busy[j] = q.busy[j], q.busy[i]
	q.busy[i].flow().at = i
	q.busy[j].flow().at = j
}

func (q *fairQueue[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *fairQueue[T]) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q.busy) {
			return
		}
		m := l
		if r := l + 1; r < len(q.busy) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}
