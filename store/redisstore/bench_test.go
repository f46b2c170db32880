package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// benchStores returns n stores on one prefix, each with its own client,
// and the counter of every command they send.
func benchStores(b *testing.B, n int) ([]*redisstore.Store, *counter) {
	cnt := &counter{}
	prefix := redistest.Prefix(b)
	ss := make([]*redisstore.Store, n)
	for i := range ss {
		c := redistest.Client(b)
		c.AddHook(cnt)
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = s
	}
	return ss, cnt
}

// requestOf returns a request of three policies (a sliding window, a token
// bucket and a fixed window) on value v, limits far above what a run
// spends.
func requestOf(v string) []sluice.Op {
	ps := []sluice.Policy{
		{Name: "sw", Algorithm: sluice.SlidingWindow, Limit: 1 << 40, Window: time.Minute},
		{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 1 << 40, Window: time.Minute},
		{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 1 << 40, Window: time.Minute},
	}
	ops := make([]sluice.Op, len(ps))
	for i := range ps {
		ops[i] = sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: ps[i].Algorithm, Policy: ps[i].Name, Value: v}, Policy: &ps[i], Hits: 1}
	}
	return ops
}

// BenchmarkApply: decisions of three policies from nodes sharing one Redis,
// spread over keys (users) or all on one hot key; cmds/op is the round
// trips per decision.
func BenchmarkApply(b *testing.B) {
	for _, bc := range []struct {
		name  string
		nodes int
		keys  int
	}{{"1node/1000keys", 1, 1000}, {"3nodes/1000keys", 3, 1000}, {"1node/hotkey", 1, 1}, {"3nodes/hotkey", 3, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			ss, cnt := benchStores(b, bc.nodes)
			reqs := make([][]sluice.Op, bc.keys)
			for i := range reqs {
				reqs[i] = requestOf("user-" + strconv.Itoa(i))
			}
			var next atomic.Int64
			ctx := context.Background()
			cnt.n.Store(0)
			cpu0 := redisCPU(b)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]sluice.Decision, 3)
				for pb.Next() {
					i := next.Add(1)
					now := t0.Add(time.Duration(i) * time.Microsecond)
					if err := ss[i%int64(len(ss))].Apply(ctx, now, reqs[i%int64(len(reqs))], dst); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cnt.n.Load())/float64(b.N), "cmds/op")
			b.ReportMetric(float64((redisCPU(b)-cpu0).Microseconds())/float64(b.N), "redis-cpu-us/op")
		})
	}
}

var _ redis.Hook = (*counter)(nil)

// redisCPU is the CPU time the package's redis-server has used (INFO cpu:
// used_cpu_sys plus used_cpu_user).
func redisCPU(b *testing.B) time.Duration {
	info, err := redistest.Client(b).Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
