package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rls is a go-control-plane client of a running sluice serve's rate limit
// service.
type rls struct {
	t    *testing.T
	conn *grpc.ClientConn
	c    rlspb.RateLimitServiceClient
}

func dialRLS(t *testing.T, addr string) *rls {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{t: t, conn: conn, c: rlspb.NewRateLimitServiceClient(conn)}
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (r *rls) ask(domain string, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	r.t.Helper()
	return r.askReq(&rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (r *rls) askReq(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := r.c.ShouldRateLimit(ctx, req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// wantStatus checks a descriptor's status: its code, its limit (0 for
// none) and what is left.
func wantStatus(t *testing.T, what string, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, limit uint32, remaining uint32) {
	t.Helper()
	var got uint32
	if st.GetCurrentLimit() != nil {
		got = st.GetCurrentLimit().GetRequestsPerUnit()
	}
	if st.GetCode() != code || got != limit || st.GetLimitRemaining() != remaining {
		t.Errorf("%s: status %v, limit %d, remaining %d; want %v, %d, %d", what, st.GetCode(), got, st.GetLimitRemaining(), code, limit, remaining)
	}
}

// inOneSecond runs f, which sends a burst against per-second limits on
// keys named by its attempt, until one attempt falls within one second of
// the wall clock (the server's too): a loaded machine may straddle two.
func inOneSecond(t *testing.T, f func(attempt int) bool) {
	t.Helper()
	for attempt := range 20 {
		// Start a fresh second: a second's counters are new in it.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
		start := time.Now()
		done := f(attempt)
		if time.Now().Unix() == start.Unix() {
			if !done {
				t.Fatal("the burst failed")
			}
			return
		}
	}
	t.Fatal("no burst fell within one second in 20 attempts")
}

// TestEnvoyReadmeExamples drives a running sluice serve, over gRPC with
// go-control-plane's client, with the configurations of envoyproxy/ratelimit's
// README, unchanged (testdata/envoy), and checks the answers that README
// documents; where envoyproxy/ratelimit burns quota on a denied request,
// Sluice's documented difference.
func TestEnvoyReadmeExamples(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/envoy", dir)
	grpcAddr := freeAddr(t)
	start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", dir, "--config-poll", "100ms")
	r := dialRLS(t, grpcAddr)

	t.Run("1 two values of one key", func(t *testing.T) {
		resp := r.ask("mongo_cps", desc("database", "users"))
		wantStatus(t, "users", resp.Statuses[0], ok, 500, 499)
		if u := resp.Statuses[0].CurrentLimit.Unit; u != rlspb.RateLimitResponse_RateLimit_SECOND {
			t.Errorf("unit %v, want SECOND", u)
		}
		resp = r.ask("mongo_cps", desc("database", "default"))
		wantStatus(t, "default", resp.Statuses[0], ok, 500, 499)
		resp = r.ask("mongo_cps", desc("database", "orders"))
		wantStatus(t, "a value not configured", resp.Statuses[0], ok, 0, 0)
		if resp.OverallCode != ok {
			t.Errorf("overall %v", resp.OverallCode)
		}
	})

	t.Run("2 nested descriptors and several per request, all-or-nothing", func(t *testing.T) {
		marketing := desc("message_type", "marketing", "to_number", "2061111111")
		number := desc("to_number", "2061111111")
		for i := range 5 {
			resp := r.ask("messaging", marketing, number)
			wantStatus(t, "marketing", resp.Statuses[0], ok, 5, uint32(4-i))
			wantStatus(t, "to_number", resp.Statuses[1], ok, 100, uint32(99-i))
		}
		// The sixth marketing message is over its 5 a day. envoyproxy/ratelimit
		// answers OVER_LIMIT and counts it against to_number too (94 left);
		// Sluice denies it whole and counts it nowhere.
		resp := r.ask("messaging", marketing, number)
		if resp.OverallCode != over {
			t.Errorf("sixth: overall %v, want OVER_LIMIT", resp.OverallCode)
		}
		wantStatus(t, "sixth, marketing", resp.Statuses[0], over, 5, 0)
		wantStatus(t, "sixth, to_number (not consumed)", resp.Statuses[1], ok, 100, 95)
		resp = r.ask("messaging", number)
		wantStatus(t, "to_number alone", resp.Statuses[0], ok, 100, 94)
		// Another number has its own limits.
		resp = r.ask("messaging", desc("message_type", "marketing", "to_number", "2062222222"))
		wantStatus(t, "another number", resp.Statuses[0], ok, 5, 4)
	})

	t.Run("3 the most specific match, and a limit of 0", func(t *testing.T) {
		resp := r.ask("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
		if resp.OverallCode != over {
			t.Errorf("blacklisted: overall %v, want OVER_LIMIT", resp.OverallCode)
		}
		wantStatus(t, "blacklisted", resp.Statuses[0], over, 0, 0)
		inOneSecond(t, func(attempt int) bool {
			ip := fmt.Sprintf("50.0.1.%d", attempt)
			good := true
			for i := range 10 {
				st := r.ask("edge_proxy_per_ip", desc("remote_address", ip)).Statuses[0]
				good = good && st.Code == ok && st.LimitRemaining == uint32(9-i)
			}
			st := r.ask("edge_proxy_per_ip", desc("remote_address", ip)).Statuses[0]
			return good && st.Code == over && st.CurrentLimit.GetRequestsPerUnit() == 10
		})
	})

	t.Run("4 a request deeper than the configuration does not match", func(t *testing.T) {
		deep := desc("key", "value", "subkey", "subvalue")
		wantStatus(t, "first configuration", r.ask("example4", deep).Statuses[0], ok, 0, 0)
		wantStatus(t, "one level", r.ask("example4", desc("key", "value")).Statuses[0], ok, 300, 299)
	})

	t.Run("5 unlimited", func(t *testing.T) {
		wantStatus(t, "ldap", r.ask("internal", desc("ldap", "x")).Statuses[0], ok, 0, math.MaxUint32)
		wantStatus(t, "azure", r.ask("internal", desc("azure", "x")).Statuses[0], ok, 100, 99)
	})

	t.Run("6 shadow mode", func(t *testing.T) {
		inOneSecond(t, func(attempt int) bool {
			svc := fmt.Sprintf("auth-service-%d", attempt)
			good := true
			for range 15 {
				resp := r.ask("example6", desc("service", svc, "user", "user-a"))
				good = good && resp.OverallCode == ok && resp.Statuses[0].Code == ok
			}
			for i := range 21 {
				resp := r.ask("example6", desc("service", svc, "user", "user-b"))
				if i < 20 {
					good = good && resp.OverallCode == ok
				} else {
					good = good && resp.OverallCode == over
				}
			}
			return good
		})
	})

	t.Run("7 replaces", func(t *testing.T) {
		inOneSecond(t, func(attempt int) bool {
			user := "bkthomps" // the configuration names the user
			one := desc("key_1", "value_1", "user", user)
			two := desc("key_2", "value_2", "user", user)
			good := true
			for i := range 10 {
				resp := r.ask("example7", one, two)
				// The replaced rule is not evaluated: no limit, untouched.
				good = good && resp.OverallCode == ok && resp.Statuses[0].CurrentLimit == nil &&
					resp.Statuses[1].CurrentLimit.GetRequestsPerUnit() == 10 && resp.Statuses[1].LimitRemaining == uint32(9-i)
			}
			good = good && r.ask("example7", one, two).OverallCode == over
			st := r.ask("example7", one).Statuses[0]
			return good && st.Code == ok && st.CurrentLimit.GetRequestsPerUnit() == 5 && st.LimitRemaining == 4
		})
	})

	t.Run("8 detailed_metric", func(t *testing.T) {
		wantStatus(t, "unspecified", r.ask("example8", desc("key1", "unspecified_value")).Statuses[0], ok, 10, 9)
		wantStatus(t, "unspecified2", r.ask("example8", desc("key1", "unspecified_value2")).Statuses[0], ok, 10, 9)
		wantStatus(t, "value1", r.ask("example8", desc("key1", "value1")).Statuses[0], ok, 20, 19)
	})

	t.Run("9 wildcards", func(t *testing.T) {
		for _, tc := range []struct {
			key, value string
			limit      uint32
		}{
			{"key1", "value1", 20}, {"key1", "valueXYZ", 20}, {"key1", "other", 0},
			{"path", "/api/123/action", 20}, {"path", "/api/user-id/action", 20}, {"path", "/api/123/other", 0},
			{"route", "/api/v1/resource/123/action", 20}, {"route", "/api/v2/resource/456/action", 20}, {"route", "/api/v1/other/123/action", 0},
		} {
			want := uint32(0)
			if tc.limit > 0 {
				want = tc.limit - 1 // each value its own counter
			}
			wantStatus(t, tc.key+"="+tc.value, r.ask("example9", desc(tc.key, tc.value)).Statuses[0], ok, tc.limit, want)
		}
	})

	t.Run("10 value_to_metric", func(t *testing.T) {
		wantStatus(t, "api GET", r.ask("example10", desc("route", "api", "http_method", "GET", "subject_id", "123")).Statuses[0], ok, 60, 59)
		wantStatus(t, "web POST", r.ask("example10", desc("route", "web", "http_method", "POST", "subject_id", "456")).Statuses[0], ok, 60, 59)
		wantStatus(t, "readfile", r.ask("example10_wildcard", desc("user", "alice", "action", "readfile", "resource", "documents")).Statuses[0], ok, 100, 99)
		wantStatus(t, "writefile", r.ask("example10_wildcard", desc("user", "alice", "action", "writefile", "resource", "documents")).Statuses[0], ok, 0, 0)
	})

	t.Run("11 share_threshold", func(t *testing.T) {
		for i := range 5 {
			wantStatus(t, "a.pdf", r.ask("example11", desc("files", "files/a.pdf")).Statuses[0], ok, 10, uint32(9-i))
		}
		for i := range 5 {
			wantStatus(t, "b.csv", r.ask("example11", desc("files", "files/b.csv")).Statuses[0], ok, 10, uint32(4-i))
		}
		wantStatus(t, "c.txt, shared threshold reached", r.ask("example11", desc("files", "files/c.txt")).Statuses[0], over, 10, 0)
		for range 10 {
			r.ask("example11", desc("files_no_share", "files_no_share/a.pdf"))
		}
		wantStatus(t, "no_share a.pdf", r.ask("example11", desc("files_no_share", "files_no_share/a.pdf")).Statuses[0], over, 10, 0)
		wantStatus(t, "no_share b.csv", r.ask("example11", desc("files_no_share", "files_no_share/b.csv")).Statuses[0], ok, 10, 9)
		wantStatus(t, "api/v1", r.ask("example11_metrics", desc("route", "api/v1", "method", "GET")).Statuses[0], ok, 60, 59)
		wantStatus(t, "api/v2 shares it", r.ask("example11_metrics", desc("route", "api/v2", "method", "GET")).Statuses[0], ok, 60, 58)
	})

	t.Run("hits_addend, per request and per descriptor", func(t *testing.T) {
		resp := r.askReq(&rlspb.RateLimitRequest{Domain: "internal", HitsAddend: 10, Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("azure", "h")}})
		wantStatus(t, "request addend 10", resp.Statuses[0], ok, 100, 90)
		d := desc("azure", "h")
		d.HitsAddend = wrapperspb.UInt64(0) // a read
		resp = r.askReq(&rlspb.RateLimitRequest{Domain: "internal", HitsAddend: 10, Descriptors: []*ratelimitpb.RateLimitDescriptor{d}})
		wantStatus(t, "descriptor addend 0", resp.Statuses[0], ok, 100, 90)
		d.HitsAddend = wrapperspb.UInt64(91) // more than is left
		resp = r.askReq(&rlspb.RateLimitRequest{Domain: "internal", Descriptors: []*ratelimitpb.RateLimitDescriptor{d}})
		wantStatus(t, "descriptor addend 91", resp.Statuses[0], over, 100, 0)
		d.HitsAddend = wrapperspb.UInt64(90)
		resp = r.askReq(&rlspb.RateLimitRequest{Domain: "internal", Descriptors: []*ratelimitpb.RateLimitDescriptor{d}})
		wantStatus(t, "descriptor addend 90: the denied 91 consumed nothing", resp.Statuses[0], ok, 100, 0)
	})

	t.Run("a limit set by the request", func(t *testing.T) {
		d := desc("anything", "x")
		d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
		for i := range 2 {
			wantStatus(t, "override", r.ask("internal", d).Statuses[0], ok, 2, uint32(1-i))
		}
		resp := r.ask("internal", d)
		wantStatus(t, "override, third", resp.Statuses[0], over, 2, 0)
		if s := resp.Statuses[0].DurationUntilReset.GetSeconds(); s < 1 || s > 3600 {
			t.Errorf("duration until reset %ds, want within the hour", s)
		}
	})

	t.Run("a domain not configured: OK, nothing counted, even with a request's limit", func(t *testing.T) {
		d := desc("anything", "x")
		d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_HOUR}
		for range 3 {
			resp := r.ask("no_such_domain", d)
			if resp.OverallCode != ok || resp.Statuses[0].Code != ok || resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("an unknown domain: %v, want OK without a limit", resp)
			}
		}
	})

	t.Run("Sluice's fields: a token bucket with a burst, and two limits", func(t *testing.T) {
		for i := range 10 {
			wantStatus(t, "burst", r.ask("sluice_ext", desc("api_key", "k1")).Statuses[0], ok, 5, uint32(9-i))
		}
		wantStatus(t, "past the burst", r.ask("sluice_ext", desc("api_key", "k1")).Statuses[0], over, 5, 0)
		// The status is the limit with the least left: the daily 8.
		for i := range 8 {
			wantStatus(t, "two limits", r.ask("sluice_ext", desc("plan", "pro")).Statuses[0], ok, 8, uint32(7-i))
		}
		wantStatus(t, "the daily limit", r.ask("sluice_ext", desc("plan", "pro")).Statuses[0], over, 8, 0)
	})

	t.Run("bad requests name what is wrong", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		for _, tc := range []struct {
			req  *rlspb.RateLimitRequest
			want string
		}{
			{&rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("a", "b")}}, "domain"},
			{&rlspb.RateLimitRequest{Domain: "internal"}, "descriptors"},
		} {
			_, err := r.c.ShouldRateLimit(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want InvalidArgument naming %s", tc.req, err, tc.want)
			}
		}
	})

	t.Run("health and reflection", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		// "ratelimit" is envoyproxy/ratelimit's own name for its health.
		for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
			h, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health of %q: %v, %v", svc, h, err)
			}
		}
		stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		got, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range got.GetListServicesResponse().GetService() {
			names = append(names, s.Name)
		}
		if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
			t.Errorf("reflection lists %v", names)
		}
	})

	// Last: the second configuration of example 4 replaces the first, and
	// is reloaded on change.
	t.Run("4 reloaded: the nested configuration matches", func(t *testing.T) {
		b, err := os.ReadFile("testdata/envoy-example4/example4.yaml")
		if err != nil {
			t.Fatal(err)
		}
		writeFileAtomic(t, filepath.Join(dir, "example4.yaml"), b)
		deep := desc("key", "value", "subkey", "subvalue")
		waitFor(t, "the reload", func() bool { return r.ask("example4", deep).Statuses[0].CurrentLimit != nil })
		wantStatus(t, "one level, no longer limited", r.ask("example4", desc("key", "value")).Statuses[0], ok, 0, 0)
		// A bad file is rejected, and the configuration in force stays.
		writeFileAtomic(t, filepath.Join(dir, "bad.yaml"), []byte("domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
		time.Sleep(500 * time.Millisecond) // five polls: long enough to have been read twice
		if st := r.ask("example4", deep).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 300 {
			t.Errorf("after a bad file: %v, want the configuration in force", st)
		}
	})
}

// TestEnvoyPerDescriptor: with --envoy-per-descriptor, a request denied by
// one descriptor consumes from the others, as envoyproxy/ratelimit does; and
// --envoy-response-headers adds the RateLimit headers of the descriptor
// nearest its limit.
func TestEnvoyPerDescriptor(t *testing.T) {
	grpcAddr := freeAddr(t)
	start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", "testdata/envoy",
		"--envoy-per-descriptor", "--envoy-response-headers")
	r := dialRLS(t, grpcAddr)
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	for range 5 {
		r.ask("messaging", marketing, number)
	}
	resp := r.ask("messaging", marketing, number)
	if resp.OverallCode != over {
		t.Errorf("sixth: overall %v, want OVER_LIMIT", resp.OverallCode)
	}
	wantStatus(t, "sixth, to_number (consumed, as envoyproxy/ratelimit does)", resp.Statuses[1], ok, 100, 94)
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["RateLimit-Limit"] != "5" || headers["RateLimit-Remaining"] != "0" || headers["RateLimit-Reset"] == "" {
		t.Errorf("headers %v, want the marketing limit's: 5, 0 left", headers)
	}
}

// TestEnvoyToken: with --grpc-token-file, a call without the token is
// refused, one with it answered, and health checks need none; streams
// too: server reflection (the service list and descriptors) needs it,
// health's Watch does not.
func TestEnvoyToken(t *testing.T) {
	grpcAddr := freeAddr(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("an-envoy-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", "testdata/envoy", "--grpc-token-file", tokenFile)
	r := dialRLS(t, grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := &rlspb.RateLimitRequest{Domain: "internal", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("azure", "x")}}
	if _, err := r.c.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v, want Unauthenticated", err)
	}
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong-token-0123456789")
	if _, err := r.c.ShouldRateLimit(bad, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with a wrong token: %v, want Unauthenticated", err)
	}
	good := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer an-envoy-token-0123456789")
	if resp, err := r.c.ShouldRateLimit(good, req); err != nil || resp.OverallCode != ok {
		t.Errorf("with the token: %v, %v", resp, err)
	}
	if h, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v, %v", h, err)
	}
	watch, err := healthpb.NewHealthClient(r.conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := watch.Recv(); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health's watch without a token: %v, %v", h, err)
	}

	// reflect asks server reflection for the services, then the file of the
	// rate limit service, on one stream, and returns what it answered.
	reflect := func(ctx context.Context) (services []string, files int, err error) {
		stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, 0, err
		}
		defer stream.CloseSend()
		for _, req := range []*reflectionpb.ServerReflectionRequest{
			{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}},
			{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}},
		} {
			// A Send the server has already refused fails with io.EOF:
			// the stream's status comes from Recv, whichever failed.
			_ = stream.Send(req)
			resp, err := stream.Recv()
			if err != nil {
				return services, files, err
			}
			for _, s := range resp.GetListServicesResponse().GetService() {
				services = append(services, s.Name)
			}
			files += len(resp.GetFileDescriptorResponse().GetFileDescriptorProto())
		}
		return services, files, nil
	}
	if services, files, err := reflect(ctx); status.Code(err) != codes.Unauthenticated || len(services) > 0 || files > 0 {
		t.Errorf("reflection without the token: %v, %d files, %v; want Unauthenticated and nothing", services, files, err)
	}
	if services, files, err := reflect(bad); status.Code(err) != codes.Unauthenticated || len(services) > 0 || files > 0 {
		t.Errorf("reflection with a wrong token: %v, %d files, %v; want Unauthenticated and nothing", services, files, err)
	}
	if services, files, err := reflect(good); err != nil || !slices.Contains(services, "envoy.service.ratelimit.v3.RateLimitService") || files == 0 {
		t.Errorf("reflection with the token: %v, %d files, %v", services, files, err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFileAtomic replaces a file by a rename, as configuration tools do.
func writeFileAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
