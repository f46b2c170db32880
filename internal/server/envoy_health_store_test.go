package server

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestEnvoyHealthFollowsStore: with --store redis, the rate limit
// service's gRPC health (for "", its full name and "ratelimit") and the
// compatible mode's /healthcheck follow the store's readiness: once
// redis-server is killed, a Watch stream sees NOT_SERVING and
// /healthcheck answers 500; once it is back on its port, SERVING and 200.
// However many ask the health, the store is probed by one poller: the
// PINGs redis counts stay within the poller's period.
func TestEnvoyHealthFollowsStore(t *testing.T) {
	rs := redistest.StartOwn(t)
	c := testConfig()
	c.Store = "redis"
	c.Redis = RedisConfig{URL: "redis://" + rs.Addr}
	c.EnvoyCompat = true
	c.Envoy.GRPCAddr = "127.0.0.1:0"
	var log syncBuffer
	s, err := New(context.Background(), c, newTextLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.Close()
	}()
	waitLog(t, &log, "sluice serving")
	m := regexp.MustCompile(`envoy rate limit service serving" addr=(\S+)`).FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("no gRPC address in the log:\n%s", log.String())
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	httpc := &http.Client{Timeout: 10 * time.Second}
	defer httpc.CloseIdleConnections()
	healthcheck := func() int {
		resp, err := httpc.Get("http://" + s.Addr().String() + "/healthcheck")
		if err != nil {
			t.Fatalf("GET /healthcheck: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	// Patience, not a timing: the poller's period is a second.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	watch, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: envoyrls.ReferenceHealthName})
	if err != nil {
		t.Fatal(err)
	}
	// next waits for the Watch stream to say want.
	next := func(what string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			r, err := watch.Recv()
			if err != nil {
				t.Fatalf("%s: Watch: %v; want %v", what, err, want)
			}
			if r.GetStatus() == want {
				return
			}
		}
	}
	// every checks each name's health and /healthcheck.
	every := func(what string, want healthpb.HealthCheckResponse_ServingStatus, code int) {
		t.Helper()
		for _, name := range []string{"", envoyrls.ServiceName, envoyrls.ReferenceHealthName} {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.GetStatus() != want {
				t.Errorf("%s: health of %q %v, %v; want %v", what, name, r.GetStatus(), err, want)
			}
		}
		if got := healthcheck(); got != code {
			t.Errorf("%s: /healthcheck %d, want %d", what, got, code)
		}
	}
	next("redis up", healthpb.HealthCheckResponse_SERVING)
	every("redis up", healthpb.HealthCheckResponse_SERVING, 200)

	// A busy prober: its checks do not reach the store.
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	before, start := pings(t, rc), time.Now()
	for range 100 {
		hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: envoyrls.ReferenceHealthName})
		healthcheck()
	}
	// The poller's checks in that time, and one each side; INFO is no PING.
	if got, most := pings(t, rc)-before, int(time.Since(start)/storePoll)+2; got > most {
		t.Errorf("200 health checks made %d PINGs of the store; want at most %d, the poller's", got, most)
	}
	rc.Close()

	rs.Stop()
	next("redis killed", healthpb.HealthCheckResponse_NOT_SERVING)
	every("redis killed", healthpb.HealthCheckResponse_NOT_SERVING, 500)
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	next("redis back", healthpb.HealthCheckResponse_SERVING)
	every("redis back", healthpb.HealthCheckResponse_SERVING, 200)
}

// pings is the number of PINGs redis has answered.
func pings(t *testing.T, rc *redis.Client) int {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_ping:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestEnvoyHealthStoreAndConfig: the health is SERVING only while the
// store is ready and, with --envoy-health-needs-config, a domain is
// loaded: NOT_SERVING if either says so. After the server's shutdown
// (hs.Shutdown), the store's recovery changes nothing.
func TestEnvoyHealthStoreAndConfig(t *testing.T) {
	rs := redistest.StartOwn(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	defer rc.Close()
	empty, _ := envoyrls.Parse(nil)
	one, err := envoyrls.Parse([]envoyrls.File{{Name: "d.yaml", Data: []byte("domain: d\n")}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cfg := empty
	h := &envoyHealth{needsConfig: true, current: func() *envoyrls.Config { mu.Lock(); defer mu.Unlock(); return cfg }}
	load := func(c *envoyrls.Config) {
		mu.Lock()
		cfg = c
		mu.Unlock()
		h.update() // as a reload does
	}
	hs := health.NewServer()
	h.serve(hs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.watchStore(ctx, func(ctx context.Context) error { return rc.Ping(ctx).Err() }, 10*time.Millisecond, time.Second, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	want := func(what string, st healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: envoyrls.ReferenceHealthName})
			if err == nil && r.GetStatus() == st && h.healthy() == (st == healthpb.HealthCheckResponse_SERVING) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, %v, healthy %v; want %v", what, r.GetStatus(), err, h.healthy(), st)
			}
		}
	}
	want("store up, no domain", healthpb.HealthCheckResponse_NOT_SERVING)
	load(one)
	want("store up, a domain", healthpb.HealthCheckResponse_SERVING)
	rs.Stop()
	want("store down, a domain", healthpb.HealthCheckResponse_NOT_SERVING)
	load(empty)
	want("store down, no domain", healthpb.HealthCheckResponse_NOT_SERVING)
	load(one)
	want("store down, a domain again", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	want("store back, a domain", healthpb.HealthCheckResponse_SERVING)
	rs.Stop()
	want("store down before shutdown", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.Shutdown()
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !h.healthy(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poller never saw the store back")
		}
	}
	h.update()
	if r, _ := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ""}); r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after shutdown, the store back: %v; want NOT_SERVING", r.GetStatus())
	}
}
