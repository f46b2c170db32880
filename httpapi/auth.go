package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
)

// principal is who a request comes from: the admin or a tenant's key, as
// the tenant layer authenticates them.
type principal = tenancy.Principal

var errInvalidJSONBody = sluice.Invalid("body", "is not a JSON value")

// authenticate returns who sent r, by the bearer token of its
// Authorization header (tenancy.Service.Authenticate).
func (h *Handler) authenticate(ctx context.Context, r *http.Request) (principal, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		token = ""
	}
	return h.tenants.Authenticate(ctx, token)
}

// ActorHeader names, for the audit trail, the person behind a change made
// with the admin key, which many operators may share.
const ActorHeader = "X-Sluice-Actor"

// actor is who makes a change r asks for: who, and the name its
// ActorHeader gives.
func actor(r *http.Request, who principal) tenancy.Actor {
	return tenancy.Actor{Principal: who, Name: r.Header.Get(ActorHeader)}
}
