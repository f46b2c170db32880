package fairsim

import (
	"slices"
	"time"
)

// gpsStep is the fluid reference's time step: fine beside the quota's 1 s
// window and the waits measured, coarse enough to run in milliseconds.
const gpsStep = 10 * time.Millisecond

// gpsShares returns what an ideal fluid max-min fair server would serve
// each customer over the run: generalised processor sharing (GPS) at the
// quota's rate with equal weights, the textbook definition of max-min
// fairness moment by moment (Parekh and Gallager), fed the same arrivals
// and dropping the part of a request still unserved MaxWait after it
// arrived, as the strategies drop what waits longer. At every instant it
// divides the rate equally among the customers with something waiting,
// giving any that needs less what it needs and the rest to the others; the
// backlog a burst leaves is carried over as a real queue carries it. It is
// the share a customer asking in bursts is owed, which a water-fill over
// the whole run overstates: that owes a burst of a few seconds the average
// of a minute, more than the fair level while it lasts.
func gpsShares(arrivals []request, cfg Config) []float64 {
	type unit struct {
		at   time.Duration
		left float64 // the part not yet served
	}
	queues := make([][]unit, cfg.Customers)
	backlog := make([]float64, cfg.Customers)
	served := make([]float64, cfg.Customers)
	var active []int // customers with something waiting
	var sizes []float64
	perStep := float64(cfg.Rate) * gpsStep.Seconds()
	i := 0
	for now := time.Duration(0); now < cfg.Duration; now += gpsStep {
		for ; i < len(arrivals) && arrivals[i].at < now+gpsStep; i++ {
			c := arrivals[i].cust
			if len(queues[c]) == 0 {
				active = append(active, c)
			}
			queues[c] = append(queues[c], unit{arrivals[i].at, 1})
			backlog[c]++
		}
		sizes = sizes[:0]
		for _, c := range active {
			q := queues[c]
			for len(q) > 0 && now-q[0].at > cfg.MaxWait {
				backlog[c] -= q[0].left
				q = q[1:]
			}
			queues[c] = q
			sizes = append(sizes, backlog[c])
		}
		level := waterLevel(sizes, perStep)
		for _, c := range active {
			give := min(backlog[c], level)
			served[c] += give
			backlog[c] -= give
			q := queues[c]
			for give > 1e-9 && len(q) > 0 {
				take := min(give, q[0].left)
				q[0].left -= take
				give -= take
				if q[0].left <= 1e-9 {
					q = q[1:]
				}
			}
			queues[c] = q
		}
		active = slices.DeleteFunc(active, func(c int) bool {
			if len(queues[c]) == 0 {
				backlog[c] = 0
				return true
			}
			return false
		})
	}
	return served
}

// waterLevel returns the level L at which sum(min(b_i, L)) = capacity, or
// the largest b_i if all of them fit.
func waterLevel(b []float64, capacity float64) float64 {
	s := slices.Clone(b)
	slices.Sort(s)
	left := capacity
	for j, v := range s {
		n := float64(len(s) - j)
		if v*n >= left {
			return left / n
		}
		left -= v
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}
