package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/pebblestore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// stores are the stores of a server, whichever kind.
type stores struct {
	counters sluice.Store
	tenants  sluice.TenantStore
	sessions sluice.SessionStore
	audit    sluice.AuditLog
	registry sluice.Registry
	ready    func(context.Context) error
	close    func() error
	local    bool // in process: no network between a decision and its state
	// metrics publishes the store's own counts, if it keeps any.
	metrics prometheus.Collector
	// nodes lists the live nodes of a shared store, for the dashboard to
	// sum them (DynamoDB, Redis); nil for a store of one process.
	nodes peer.Store
	// sweepSessions removes expired sessions' state, periodically (not
	// for DynamoDB and Redis, whose TTLs do it).
	sweepSessions func(now time.Time)
}

// RedisConfig reaches a Redis (or Valkey).
type RedisConfig struct {
	URL    string // --redis-url, as redisstore.Dial takes it; may hold a password
	CAFile string // --redis-ca: PEM file of the CAs of a rediss:// server; empty: the system's
}

// client returns a client of the Redis c names.
func (c RedisConfig) client() (redis.UniversalClient, error) {
	var o redisstore.DialOptions
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-ca: %w", err)
		}
		o.RootCAs = x509.NewCertPool()
		if !o.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--redis-ca: %s holds no PEM certificate", c.CAFile)
		}
	}
	return redisstore.DialWith(c.URL, o)
}

func openStores(ctx context.Context, c Config, log *slog.Logger) (stores, error) {
	mem := memstore.Options{MaxKeys: c.MaxKeys}
	if c.Store == "redis" {
		client, err := c.Redis.client()
		if err != nil {
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		// Each decision's deadline is the engine's (defaults.timeout), and
		// a tenant's calls have theirs: the store's own bounds the rest.
		s, err := redisstore.New(client, redisstore.Options{CacheKeys: c.MaxKeys, Timeout: 10 * time.Second, Logger: log})
		if err != nil {
			client.Close()
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		redis.SetLogger(redisLog{log})
		log.Info("redis store", "url", redisstore.Redact(c.Redis.URL), "ca", c.Redis.CAFile)
		// A first ping loads the script: the first decisions are one round
		// trip. Redis not answering yet is no reason not to serve: the
		// policies' fail modes answer until it does, and /readyz says so.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := s.Ping(pctx); err != nil {
			log.Warn("redis does not answer yet: the policies' fail modes decide until it does", "err", err)
		}
		cancel()
		return stores{counters: s, tenants: s, sessions: s, audit: s, registry: s, nodes: s, ready: s.Ping,
			close: func() error { return errors.Join(s.Close(), client.Close()) }, metrics: redisPool{client}}, nil
	}
	if c.Store == "dynamodb" {
		counter := newCountingClient(nil)
		db, err := c.Dynamo.clientVia(ctx, counter)
		if err != nil {
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		s, err := dynamostore.New(db, dynamostore.Options{Table: c.Dynamo.Table, CacheKeys: c.MaxKeys, Region: c.RegionID, Regions: c.Regions})
		if err != nil {
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		return stores{counters: s, tenants: s, sessions: s, audit: s, registry: s, nodes: s, ready: s.Ping, close: s.Close, metrics: metrics.DynamoDB(s.Stats, counter.counts)}, nil
	}
	if c.Store == "memory" {
		s := memstore.New(mem)
		sessions := &memstore.Sessions{}
		return stores{counters: s, tenants: &memstore.Tenants{}, sessions: sessions, audit: &memstore.Audit{}, close: s.Close, local: true,
			sweepSessions: func(now time.Time) { sessions.Sweep(now) }}, nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return stores{}, fmt.Errorf("serve: data dir: %w", err)
	}
	interval := c.SyncInterval
	if interval == 0 {
		interval = -1 // pebblestore's "as soon as asked"; its 0 is its default
	}
	s, err := pebblestore.Open(c.DataDir, pebblestore.Options{Memory: mem, SyncInterval: interval, WriteBehind: c.WriteBehind, Logger: log})
	if err != nil {
		return stores{}, fmt.Errorf("serve: %w", err)
	}
	var collector prometheus.Collector
	if _, ok := s.WriteBehindStats(); ok {
		collector = writeBehindMetrics{s}
	}
	return stores{counters: s, tenants: s, sessions: s, audit: s, ready: s.Ping, close: s.Close, local: true, metrics: collector,
		sweepSessions: func(now time.Time) {
			if _, err := s.SweepSessions(now); err != nil {
				log.Warn("sweeping expired sessions", "err", err)
			}
		}}, nil
}

// writeBehindMetrics publishes the pebble store's writes behind
// (--write-behind) at each scrape: what a crash now would forget, and
// whether the writes succeed.
type writeBehindMetrics struct{ s *pebblestore.Store }

var (
	wbPending = prometheus.NewDesc("sluice_store_write_behind_pending", "Durable counters changed and not yet synced to disk (--write-behind): what a crash now would forget.", nil, nil)
	wbWritten = prometheus.NewDesc("sluice_store_write_behind_written_total", "Counter states written to disk by the writes behind (--write-behind): a key changed many times in an interval is written once.", nil, nil)
	wbFailed  = prometheus.NewDesc("sluice_store_write_behind_failures_total", "Writes behind (--write-behind) that failed; their counters are written again by the next.", nil, nil)
	wbLast    = prometheus.NewDesc("sluice_store_write_behind_last_success_timestamp_seconds", "When the last write behind (--write-behind) succeeded, in Unix seconds; 0 before the first.", nil, nil)
)

func (m writeBehindMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{wbPending, wbWritten, wbFailed, wbLast} {
		ch <- d
	}
}

func (m writeBehindMetrics) Collect(ch chan<- prometheus.Metric) {
	st, _ := m.s.WriteBehindStats()
	last := 0.0
	if !st.LastDone.IsZero() {
		last = float64(st.LastDone.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(wbPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(wbWritten, prometheus.CounterValue, float64(st.Written))
	ch <- prometheus.MustNewConstMetric(wbFailed, prometheus.CounterValue, float64(st.Failed))
	ch <- prometheus.MustNewConstMetric(wbLast, prometheus.GaugeValue, last)
}

// redisPool publishes the Redis client's connection pool at each scrape:
// where a slow or gone Redis shows first (decisions waiting for a
// connection, connections in use).
type redisPool struct{ c redis.UniversalClient }

var (
	redisConns   = prometheus.NewDesc("sluice_redis_pool_connections", "Connections of the Redis client's pool, by state: total (open), idle.", []string{"state"}, nil)
	redisPending = prometheus.NewDesc("sluice_redis_pool_pending", "Calls waiting now for a connection of the Redis client's pool.", nil, nil)
	redisWaits   = prometheus.NewDesc("sluice_redis_pool_waits_total", "Calls that waited for a connection of the Redis client's pool.", nil, nil)
	redisWaited  = prometheus.NewDesc("sluice_redis_pool_wait_seconds_total", "Time calls spent waiting for a connection of the Redis client's pool.", nil, nil)
	redisTimeout = prometheus.NewDesc("sluice_redis_pool_timeouts_total", "Calls that gave up waiting for a connection (the pool's own timeout; a decision's deadline ends its wait sooner, uncounted here).", nil, nil)
	redisMisses  = prometheus.NewDesc("sluice_redis_pool_misses_total", "Calls that found no idle connection and opened or waited for one.", nil, nil)
)

func (p redisPool) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{redisConns, redisPending, redisWaits, redisWaited, redisTimeout, redisMisses} {
		ch <- d
	}
}

func (p redisPool) Collect(ch chan<- prometheus.Metric) {
	st := p.c.PoolStats()
	ch <- prometheus.MustNewConstMetric(redisConns, prometheus.GaugeValue, float64(st.TotalConns), "total")
	ch <- prometheus.MustNewConstMetric(redisConns, prometheus.GaugeValue, float64(st.IdleConns), "idle")
	ch <- prometheus.MustNewConstMetric(redisPending, prometheus.GaugeValue, float64(st.PendingRequests))
	ch <- prometheus.MustNewConstMetric(redisWaits, prometheus.CounterValue, float64(st.WaitCount))
	ch <- prometheus.MustNewConstMetric(redisWaited, prometheus.CounterValue, float64(st.WaitDurationNs)/1e9)
	ch <- prometheus.MustNewConstMetric(redisTimeout, prometheus.CounterValue, float64(st.Timeouts))
	ch <- prometheus.MustNewConstMetric(redisMisses, prometheus.CounterValue, float64(st.Misses))
}

// redisLog takes go-redis's own messages (every dial that failed, every
// try) into the server's log, at debug: a store failure reaches the log
// already, rate-limited, as the fail modes' warning; at the default level
// these would repeat it many times a second while Redis is gone, outside
// --log-format.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
