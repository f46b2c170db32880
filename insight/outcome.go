package insight

import "github.com/sluicehq/sluice/engine"

// Refused reports whether a decision's outcome refused the request: denied
// by the policy's limit, by its penalty box or an operator's block
// (penalised; both answer 429), or by a fail-closed policy whose store
// failed (503). These are what the dashboard counts as denied, in its
// tiles, series, top lists and top tenants. The other outcomes admitted
// the request: allowed, and shadow_denied and failed_open, which are
// admits a policy would have refused.
func Refused(o engine.Outcome) bool {
	return o == engine.Denied || o == engine.Penalised || o == engine.FailedClosed
}

// KindNames names the counts of a point, in order: the engine's outcomes.
func KindNames() []string {
	out := make([]string, Kinds)
	for i := range out {
		out[i] = engine.Outcome(i).String()
	}
	return out
}

// RefusedKinds and AdmittedKinds name the kinds of a point whose
// decisions refused the request and those that admitted it (Refused).
func RefusedKinds() []string  { return kindsWhere(true) }
func AdmittedKinds() []string { return kindsWhere(false) }

func kindsWhere(refused bool) []string {
	var out []string
	for i := range Kinds {
		if o := engine.Outcome(i); Refused(o) == refused {
			out = append(out, o.String())
		}
	}
	return out
}
