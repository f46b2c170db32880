package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/wire"
)

// The HTTP side of envoyproxy/ratelimit, served on --addr in the
// compatible mode (--envoy-compat), before Sluice's HTTP API:
//
//   - GET /healthcheck: 200 "OK" while the rate limit service is serving
//     (its gRPC health for "ratelimit", which follows the store's
//     readiness), else 500;
//   - POST /json: a RateLimitRequest in protojson, decided as over gRPC,
//     answered in protojson: 200 when OK, 429 when OVER_LIMIT, 500 when
//     UNKNOWN; 400 for a body that is not one, and, as the reference,
//     for the service's errors, but a failure of the server's (the store
//     or the limiter unavailable, a deadline) is 500.
//
// /json spends limits as the gRPC calls do, so it is held to their token
// (--grpc-token-file), sent as "Authorization: Bearer <token>"; with
// client certificates (--grpc-client-ca) and no token, it is refused (403),
// not a way around them; and no web
// page may call it (a request with an Origin is refused unless
// --allowed-origins names it): a form's POST needs no CORS preflight.
//
// The reference has no authentication on its HTTP port. Sluice's HTTP API
// does not open for that: off loopback without an admin key, where serve
// refuses to start otherwise, the compatible mode serves /healthcheck,
// /json, /healthz and /readyz alone (closed).

// rateLimitService decides a RateLimitRequest: envoyrls.Service.
type rateLimitService interface {
	ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
}

// envoyHTTP serves the reference's routes, and the rest to api.
type envoyHTTP struct {
	rls     func() rateLimitService     // the service of --grpc-addr; nil if none
	healthy func(context.Context) error // nil while healthy
	token   string                      // --grpc-token-file's; empty: none asked
	origins []string                    // --allowed-origins: pages that may call /json
	api     http.Handler                // Sluice's HTTP API
	closed  bool                        // of api, only /healthz and /readyz

	// certOnly: the service asks a client certificate (--grpc-client-ca)
	// and no token, so /json, which can ask neither, is refused.
	certOnly bool
}

// envoyFront returns api behind the reference's routes in the compatible
// mode, and api itself otherwise.
func (s *Server) envoyFront(api http.Handler) http.Handler {
	if !s.c.EnvoyCompat {
		return api
	}
	h := &envoyHTTP{
		rls: func() rateLimitService {
			// Set by Run before the HTTP server serves.
			if s.rls == nil || s.rls.svc == nil {
				return nil
			}
			return s.rls.svc
		},
		healthy: s.envoyHealthy,
		token:   s.c.Envoy.Token,
		origins: s.c.AllowedOrigins,
		api:     api,
		closed:  s.c.AdminKey == "" && !loopback.Addr(s.c.Addr),
	}
	h.certOnly = s.c.TLS.ClientCAFile != "" && s.c.Envoy.Token == ""
	if h.closed {
		s.log.Info("envoy compatible mode without an admin key: --addr serves /healthcheck, /json, /healthz and /readyz alone; Sluice's HTTP API, the dashboard and /metrics need an admin key", "addr", s.c.Addr)
	}
	return h
}

// envoyHealthy returns why the server is not healthy as the reference's
// health check means it, or nil: the rate limit service's gRPC health for
// "ratelimit" (NOT_SERVING while stopping, while the store is not ready,
// and with --envoy-health-needs-config while no domain is loaded); without
// the service (no --grpc-addr), the same but for stopping. Neither reaches
// the store: its poller (envoyHealth.watchStore) does, once a period.
func (s *Server) envoyHealthy(ctx context.Context) error {
	if s.rls == nil || s.rls.hs == nil {
		if !s.envoy.Healthy() {
			return errors.New("the store is not ready, or no domain is loaded")
		}
		return nil
	}
	resp, err := s.rls.hs.Check(ctx, &healthpb.HealthCheckRequest{Service: envoyrls.ReferenceHealthName})
	if err != nil {
		return err
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("the rate limit service is %v", st)
	}
	return nil
}

func (h *envoyHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthcheck" && r.URL.RawPath == "":
		h.healthcheck(w, r)
	case r.URL.Path == "/json" && r.URL.RawPath == "":
		h.json(w, r)
	case !h.closed || healthProbe(r):
		h.api.ServeHTTP(w, r)
	default:
		wire.WriteError(w, &sluice.Error{Kind: sluice.KindNotFound, Message: fmt.Sprintf(
			"no route for %s %s: off loopback, Sluice's HTTP API needs an admin key (--admin-key, $SLUICE_ADMIN_KEY or --admin-key-file); without one, the envoy compatible mode serves /healthcheck, /json, /healthz and /readyz alone", r.Method, r.URL.Path)})
	}
}

// healthProbe reports whether r asks /healthz or /readyz, which a closed
// API still answers.
func healthProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.RawPath == "" &&
		(r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

func (h *envoyHTTP) healthcheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpStatus(w, http.StatusMethodNotAllowed)
		return
	}
	r.Pattern = "GET /healthcheck" // the route of the metrics and the access log
	if h.healthy != nil {
		if err := h.healthy(r.Context()); err != nil {
			w.WriteHeader(http.StatusInternalServerError) // no body, as the reference
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("OK"))
}

func (h *envoyHTTP) json(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		httpStatus(w, http.StatusMethodNotAllowed)
		return
	}
	r.Pattern = "POST /json"
	if o, ok := r.Header["Origin"]; ok {
		origin := ""
		if len(o) > 0 {
			origin = o[0]
		}
		// Not the request's own host: a name rebound to this server is
		// of its origin.
		if !gateway.OriginAllowed(origin, "", h.origins) {
			http.Error(w, fmt.Sprintf("Forbidden: origin %q may not call /json: only pages of --allowed-origins may", origin), http.StatusForbidden)
			return
		}
	}
	if h.certOnly {
		http.Error(w, "Forbidden: the rate limit service asks a client certificate (--grpc-client-ca), which /json on --addr cannot; give it a token (--grpc-token-file) to open /json to its holders", http.StatusForbidden)
		return
	}
	if h.token != "" && !bearerIs(r, h.token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		http.Error(w, "Unauthorized: /json needs the rate limit service's token (--grpc-token-file) as Authorization: Bearer <token>", http.StatusUnauthorized)
		return
	}
	body, err := wire.ReadBodyInto(w, r, nil)
	if errors.Is(err, wire.ErrBodyTooLarge) {
		httpStatus(w, http.StatusRequestEntityTooLarge)
		return
	}
	var req rlspb.RateLimitRequest
	if err != nil || protojson.Unmarshal(body, &req) != nil {
		httpStatus(w, http.StatusBadRequest)
		return
	}
	var svc rateLimitService
	if h.rls != nil {
		svc = h.rls()
	}
	if svc == nil {
		httpStatus(w, http.StatusInternalServerError)
		return
	}
	resp, err := svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		httpStatus(w, jsonErrorStatus(err))
		return
	}
	b, err := protojson.Marshal(resp)
	if resp == nil || err != nil {
		httpStatus(w, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlspb.RateLimitResponse_UNKNOWN:
		w.WriteHeader(http.StatusInternalServerError)
	}
	w.Write(b)
}

// jsonErrorStatus is /json's status for an error of the service: 500 for a
// failure of the server's, and 400, as the reference answers every error,
// for the others (the request's, and the reference's own Unknown, a store
// failure's included in --envoy-reference-errors).
func jsonErrorStatus(err error) int {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.DeadlineExceeded, codes.ResourceExhausted, codes.DataLoss, codes.Unimplemented:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// httpStatus answers code with its text alone, as the reference does.
func httpStatus(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}

// bearerIs reports whether r carries "Authorization: Bearer <token>".
func bearerIs(r *http.Request, token string) bool {
	want := []byte("Bearer " + token)
	for _, v := range r.Header.Values("Authorization") {
		if subtle.ConstantTimeCompare([]byte(v), want) == 1 {
			return true
		}
	}
	return false
}
