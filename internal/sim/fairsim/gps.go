package fairsim

import (
	"slices"
	"time"
)

// gpsStep is the fluid reference's time step: fine beside the quota's 1 s
// window and the waits measured, coarse enough to run in milliseconds.
const gpsStep = 10 * time.Millisecond

// gpsShares returns, in cost units, what an ideal fluid fair server would
// serve each customer over the run: generalised processor sharing (GPS)
// at the quota's rate, the textbook definition of max-min fairness moment
// by moment (Parekh and Gallager), here over tenants by weight and within
// a tenant evenly over its customers (fill), fed the same arrivals. At
// every instant it divides the rate among the tenants with something
// waiting, giving any that needs less what it needs and the rest to the
// others; the backlog a burst leaves is carried over as a real queue
// carries it. A request whose service has not begun its maximum wait
// after it arrived is dropped, as the strategies drop what waits longer;
// one whose service has begun is served whole, as a real scheduler serves
// a request whole or not at all, and counts whole if it has begun by the
// end of the run (a cost-10 request arriving late would otherwise be owed
// only the part the fluid served, and a scheduler that sends it whole
// would seem to have taken more than its share). It is the share a customer asking in
// bursts is owed, which a water-fill over the whole run overstates: that
// owes a burst of a few seconds the average of a minute, more than the
// fair level while it lasts.
func gpsShares(w workload, cfg Config) []float64 {
	type unit struct {
		at      time.Duration
		left    float64 // the part not yet served
		started bool
	}
	n := len(w.custs)
	queues := make([][]unit, n)
	backlog := make([]float64, n)
	served := make([]float64, n)
	ask := make([]float64, n)
	var active []int // customers with something waiting
	perStep := float64(cfg.Rate) * gpsStep.Seconds()
	i := 0
	for now := time.Duration(0); now < cfg.Duration; now += gpsStep {
		for ; i < len(w.arrivals) && w.arrivals[i].at < now+gpsStep; i++ {
			c := w.arrivals[i].cust
			if len(queues[c]) == 0 {
				active = append(active, c)
			}
			cost := float64(w.custs[c].cost)
			queues[c] = append(queues[c], unit{at: w.arrivals[i].at, left: cost})
			backlog[c] += cost
		}
		for _, c := range active {
			q := queues[c]
			// A customer's requests share its maximum wait, so those
			// past it are the first not begun.
			j := 0
			if len(q) > 0 && q[0].started {
				j = 1
			}
			k := j
			for k < len(q) && now-q[k].at > w.custs[c].maxWait {
				backlog[c] -= q[k].left
				k++
			}
			queues[c] = append(q[:j], q[k:]...)
			ask[c] = backlog[c]
		}
		give, _ := fill(w.custs, ask, perStep)
		for _, c := range active {
			g := min(backlog[c], give[c])
			served[c] += g
			backlog[c] -= g
			q := queues[c]
			for g > 1e-9 && len(q) > 0 {
				take := min(g, q[0].left)
				q[0].left -= take
				q[0].started = true
				g -= take
				if q[0].left <= 1e-9 {
					q = q[1:]
				}
			}
			queues[c] = q
		}
		active = slices.DeleteFunc(active, func(c int) bool {
			if len(queues[c]) == 0 {
				backlog[c], ask[c] = 0, 0
				return true
			}
			return false
		})
	}
	// A request begun by the end is served whole, as a scheduler serves
	// it: a costly one begun late in the run is not owed only the part
	// the fluid had time for.
	for c, q := range queues {
		if len(q) > 0 && q[0].started {
			served[c] += q[0].left
		}
	}
	return served
}
