package main

import (
	"fmt"
	"slices"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The cases of the reproduced suite (envoy_suite_test.go runs them), in
// the reference's groups: integration tests, integration scripts, config,
// service, cache and server tests. Values with "{u}" are fresh for each
// attempt of a case that must run within one window.

// The docs/envoy.md anchor of the default mode's differences: a denied
// request consumes nothing (all-or-nothing), and a denied hit is not
// added to its counter (no burning).
const differences = "differences"

// dh is a descriptor with its own hits_addend.
func dh(hits uint64, kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// rqh is a request of hits_addend hits.
func rqh(hits uint32, domain string, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	req := rq(domain, ds...)
	req.HitsAddend = hits
	return req
}

// dl is a descriptor with a limit of its own (the request's override).
func dl(n uint32, u typepb.RateLimitUnit, kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return d
}

// countdown is a request's answers as one descriptor of limit counts
// down, then denies.
func countdown(limit uint32, u unit) func(int) answer {
	return func(i int) answer {
		if i < int(limit) {
			return allow(okSt(limit, u, limit-1-uint32(i)))
		}
		return deny(overSt(limit, u))
	}
}

// basicSteps is the integration tests' body (the reference's
// testBasicBaseConfig) over testdata/envoysuite/basic: stop is
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. With it false the reference
// counts a request's admitted descriptor when another denies (the
// all-or-nothing default mode does not: a documented difference).
func basicSteps(stop bool) []step {
	twoKeys := func(all bool) func(int) answer {
		return func(i int) answer {
			if i < 10 {
				return allow(okSt(20, uMin, 19-uint32(i)), okSt(10, uHour, 9-uint32(i)))
			}
			if all {
				return deny(okSt(20, uMin, 10), overSt(10, uHour))
			}
			return deny(okSt(20, uMin, 19-uint32(i)), overSt(10, uHour))
		}
	}
	s := []step{
		askOnce("a domain not configured", rq("nowhere", desc("greeting", "{u}")), allow(noRule())),
		askOnce("a per-second limit", rq("gauge", desc("meter", "{u}")), allow(okSt(50, uSec, 49))),
		ask("a minute limit, 25 times", 25, rq("tally", desc("account", "{u}")), countdown(20, uMin)),
		{what: "a minute and an hour limit in one request, 15 times", n: 15,
			req:  rq("tally", desc("account", "{u}-2"), desc("region", "{u}-2")),
			want: twoKeys(stop)},
		askOnce("the reset, first", rq("tally", desc("probe", "{u}")), allow(okSt(30, uMin, 29))),
		askOnce("the reset, again", rq("tally", desc("probe", "{u}")), allow(okSt(30, uMin, 28))),
	}
	if !stop {
		s[3].dflt = twoKeys(true)
	}
	return s
}

// basicCase is an integration variant of the basic body.
func basicCase(name string, env map[string]string, stop bool) suiteCase {
	c := suiteCase{name: "integration/" + name, config: "basic", modes: bothModes, env: env, window: 60, steps: basicSteps(stop)}
	if !stop {
		c.anchor = differences
	}
	return c
}

// redisCase is an integration variant of the basic body on a Redis store.
func redisCase(name string, env map[string]string, redis string) suiteCase {
	c := basicCase(name, env, false)
	c.redis = redis
	return c
}

// redisVariants are the four variants of an integration test on a Redis
// of a kind: with or without a per-second Redis and a local cache, which
// a single store makes the same.
func redisVariants(test, kind, suffix string) []suiteCase {
	return []suiteCase{
		redisCase(test+"/WithoutPerSecondRedis"+suffix, nil, kind),
		redisCase(test+"/WithPerSecondRedis"+suffix, perSecondEnv, kind),
		redisCase(test+"/WithoutPerSecondRedis"+suffix+"WithLocalCache", localOn, kind),
		redisCase(test+"/WithPerSecondRedis"+suffix+"WithLocalCache", with(perSecondEnv, localOn), kind),
	}
}

var (
	perSecondEnv = map[string]string{"REDIS_PERSECOND": "true"}
	localOn      = map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1000"}
	stopOn       = map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}
)

// with merges variables.
func with(envs ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, e := range envs {
		for k, v := range e {
			out[k] = v
		}
	}
	return out
}

// reload is the reference's ReloadWithoutWatchRoot: a domain appears
// while serving, then goes.
var reloadSteps = []step{
	askOnce("before the file", rq("hotswap", desc("lane", "{u}")), allow(noRule())),
	act("the file appears", putFile("later/hotswap.yaml", "hotswap.yaml")),
	act("the reload", waitAnswer(rq("hotswap", dh(0, "lane", "{u}")), allow(okSt(40, uSec, 40)))),
	act("a hit counts", waitAnswer(rq("hotswap", desc("lane", "{u}-hit")), allow(okSt(40, uSec, 39)))),
	act("the file goes", removeFile("hotswap.yaml")),
	act("the domain goes", waitAnswer(rq("hotswap", desc("lane", "{u}")), allow(noRule()))),
}

// shareSteps: share_threshold's shared counter, an explicit value's own
// rule, and a wildcard without sharing.
var shareSteps = []step{
	ask("docs/a.pdf", 5, rq("bucket", desc("path", "docs/a.pdf")), func(i int) answer { return allow(okSt(8, uHour, 7-uint32(i))) }),
	ask("docs/b.csv shares its counter", 3, rq("bucket", desc("path", "docs/b.csv")), func(i int) answer { return allow(okSt(8, uHour, 2-uint32(i))) }),
	askOnce("docs/c.txt: the shared counter is spent", rq("bucket", desc("path", "docs/c.txt")), deny(overSt(8, uHour))),
	askOnce("docs/index has its own rule", rq("bucket", desc("path", "docs/index")), allow(okSt(3, uHour, 2))),
	ask("img/a.png", 8, rq("bucket", desc("path", "img/a.png")), countdown(8, uHour)),
	askOnce("img/b.png counts apart", rq("bucket", desc("path", "img/b.png")), allow(okSt(8, uHour, 7))),
}

// service: desk's alpha at 10 a minute, omega with no rule.
var (
	alpha = desc("alpha", "{u}")
	omega = desc("omega", "world")
)

// overAlpha brings alpha to its limit, with omega in each request.
var overAlpha = ask("alpha to its limit", 10, rq("desk", alpha, omega), func(i int) answer {
	return allow(okSt(10, uMin, 9-uint32(i)), noRule())
})

// quotaSteps brings a's descriptor to na hits and b's to nb, alone, then
// asks both in one request.
func quotaSteps(a string, la uint32, na int, b string, lb uint32, nb int, want, dflt answer) []step {
	s := []step{
		ask(a+" alone", na, rq("pool", desc(a, "{u}")), func(i int) answer { return allow(okSt(la, uMin, la-1-uint32(i))) }),
		ask(b+" alone", nb, rq("pool", desc(b, "{u}")), func(i int) answer { return allow(okSt(lb, uMin, lb-1-uint32(i))) }),
		askOnce("both", rq("pool", desc(a, "{u}"), desc(b, "{u}")), want),
	}
	if dflt.statuses != nil {
		s[2].dflt = always(dflt)
	}
	return s
}

// metaSteps: the dynamic metadata of a request of two descriptors, each
// brought to na and nb hits alone first.
func metaSteps(a string, la uint32, na int, b string, lb uint32, nb int, want answer) []step {
	s := []step{
		ask(a+" alone", na, rq("tagged", desc(a, "{u}")), func(i int) answer { return allow(okSt(la, uMin, la-1-uint32(i))) }),
		ask(b+" alone", nb, rq("tagged", desc(b, "{u}")), func(i int) answer {
			if i >= int(lb) {
				return deny(overSt(lb, uMin))
			}
			return allow(okSt(lb, uMin, lb-1-uint32(i)))
		}),
		askOnce("both", rq("tagged", desc(a, "{u}"), desc(b, "{u}")), want),
	}
	return s
}

var (
	quotaMode    = map[string]string{"QUOTA_MODE": "true"}
	shadowMode   = map[string]string{"SHADOW_MODE": "true"}
	metadataMode = map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}
)

// The replaces script's descriptors: Envoy's route actions made of the
// headers each request carries.
func userFlag(user, flag string) *ratelimitpb.RateLimitDescriptor {
	return desc("user", user, "flag", flag)
}

func srcDst(dst string) *ratelimitpb.RateLimitDescriptor {
	return desc("src", "{u}s", "dst", dst)
}

// replacesSteps is replaces.sh, its requests as the calls Envoy makes.
var replacesSteps = []step{
	askOnce("a ban", rq("gate", userFlag("{u}z", "blocked")), deny(overSt(0, uMin))),
	{what: "a ban, and another descriptor", req: rq("gate", userFlag("{u}z", "blocked"), srcDst("plain")),
		want: always(deny(overSt(0, uMin), okSt(1, uMin, 0))),
		dflt: always(deny(overSt(0, uMin), okSt(1, uMin, 1)))},
	ask("a ban replaced by a pardon", 3, rq("gate", userFlag("{u}z", "blocked"), srcDst("pardon")), func(i int) answer {
		if i < 2 {
			return allow(noRule(), okSt(2, uMin, 1-uint32(i)))
		}
		return deny(noRule(), overSt(2, uMin))
	}),
	ask("zed's rule replaced by the destination's", 4, rq("gate", userFlag("{u}a", "zed"), srcDst("zed")), func(i int) answer {
		if i < 3 {
			return allow(noRule(), okSt(3, uMin, 2-uint32(i)))
		}
		return deny(noRule(), overSt(3, uMin))
	}),
	ask("zed's rule applied: nothing replaces it", 2, rq("gate", userFlag("{u}a", "zed"), srcDst("notzed")), func(i int) answer {
		if i < 1 {
			return allow(okSt(1, uMin, 0), noRule())
		}
		return deny(overSt(1, uMin), noRule())
	}),
	askOnce("the destination's limit, spent", rq("gate", userFlag("{u}a", "zed"), srcDst("zed")), deny(noRule(), overSt(3, uMin))),
	ask("two rules replaced by a category's", 6, rq("gate", userFlag("{u}a", "zed"), srcDst("ghost"), desc("kind", "{u}k")), func(i int) answer {
		if i < 5 {
			return allow(noRule(), noRule(), okSt(5, uMin, 4-uint32(i)))
		}
		return deny(noRule(), noRule(), overSt(5, uMin))
	}),
	ask("zed's rule for another user", 2, rq("gate", userFlag("{u}2", "zed")), countdown(1, uMin)),
	{what: "a flag's rule and ghost's, neither replaced", n: 3, req: rq("gate", userFlag("{u}3", "f3"), srcDst("ghost")),
		want: func(i int) answer {
			if i < 2 {
				return allow(okSt(3, uMin, 2-uint32(i)), okSt(2, uMin, 1-uint32(i)))
			}
			return deny(okSt(3, uMin, 0), overSt(2, uMin))
		},
		dflt: func(i int) answer {
			if i < 2 {
				return allow(okSt(3, uMin, 2-uint32(i)), okSt(2, uMin, 1-uint32(i)))
			}
			return deny(okSt(3, uMin, 1), overSt(2, uMin))
		}},
	askOnce("the category's limit, spent", rq("gate", userFlag("{u}a", "zed"), srcDst("ghost"), desc("kind", "{u}k")), deny(noRule(), noRule(), overSt(5, uMin))),
}

// The quota scripts' descriptors, as Envoy sends them: a read (hits 0)
// before the request, and a hit when it is done.
var (
	svcOneRead = dh(0, "svc", "one")
	svcTwoRead = dh(0, "svc", "two")
)

func routed(a answer, to string) answer {
	a.meta = map[string]string{"domain": "metered", "metadata.routed.to": to}
	return a
}

// multiserviceSteps is multiservice-tokenquota.sh: each request reads
// both services' quotas, is routed by the metadata of those that pass,
// and when done counts one hit against the service it went to. The
// reference burns the hits a quota denies, so its routing moves on to
// service two and then denies; Sluice's default mode does not burn them,
// so service one's quota, full but not over, keeps passing.
var multiserviceSteps = func() []step {
	read := rq("metered", svcOneRead, svcTwoRead)
	done := func(svc string) *rlspb.RateLimitRequest { return rq("metered", dh(1, "svc", svc)) }
	return []step{
		askOnce("1: read", read, routed(allow(okSt(1, uSec, 1), okSt(2, uSec, 2)), "one")),
		askOnce("1: done", done("one"), allow(okSt(1, uSec, 0))),
		askOnce("2: read", read, routed(allow(okSt(1, uSec, 0), okSt(2, uSec, 2)), "one")),
		askOnce("2: done", done("one"), deny(overSt(1, uSec))),
		{what: "3: read", req: read,
			want: always(routed(allow(overSt(1, uSec), okSt(2, uSec, 2)), "two")),
			dflt: always(routed(allow(okSt(1, uSec, 0), okSt(2, uSec, 2)), "one"))},
		askOnce("3: done", done("two"), allow(okSt(2, uSec, 1))),
		{what: "4: read", req: read,
			want: always(routed(allow(overSt(1, uSec), okSt(2, uSec, 1)), "two")),
			dflt: always(routed(allow(okSt(1, uSec, 0), okSt(2, uSec, 1)), "one"))},
		askOnce("4: done", done("two"), allow(okSt(2, uSec, 0))),
		{what: "5: read", req: read,
			want: always(routed(allow(overSt(1, uSec), okSt(2, uSec, 0)), "two")),
			dflt: always(routed(allow(okSt(1, uSec, 0), okSt(2, uSec, 0)), "one"))},
		askOnce("5: done", done("two"), deny(overSt(2, uSec))),
		{what: "6: read", req: read,
			want: always(routed(deny(overSt(1, uSec), overSt(2, uSec)), "-")),
			dflt: always(routed(allow(okSt(1, uSec, 0), okSt(2, uSec, 0)), "one"))},
		act("the window turns", nextWindow),
		askOnce("7: read", read, routed(allow(okSt(1, uSec, 1), okSt(2, uSec, 2)), "one")),
	}
}()

// cache: the reference's cache tests' counts, reached by real hits.
var (
	redisSteps = []step{
		ask("(1) fast, 4 hits", 4, rq("store", desc("fast", "{u}")), func(i int) answer { return allow(okSt(10, uSec, 9-uint32(i))) }),
		askOnce("(1) fast at 5 of 10", rq("store", desc("fast", "{u}")), allow(okSt(10, uSec, 5))),
		ask("(2) slow to its limit", 10, rq("store", desc("slow", "{u}")), countdown(10, uMin)),
		askOnce("(2) no rule, and slow past its limit", rq("store", dh(1, "nothing", "here"), dh(1, "slow", "{u}")), deny(noRule(), overSt(10, uMin))),
		ask("(3) drawer past its limit", 7, rq("store", desc("drawer", "{u}")), countdown(6, uHour)),
		ask("(3) slot to its limit", 4, rq("store", desc("drawer", "{u}-x", "slot", "{u}")), countdown(4, uDay)),
		{what: "(3) drawer read, slot past its limit", req: rq("store", dh(0, "drawer", "{u}"), dh(1, "drawer", "{u}-x", "slot", "{u}")),
			want: always(deny(overSt(6, uHour), overSt(4, uDay))),
			dflt: always(deny(okSt(6, uHour, 0), overSt(4, uDay)))},
	}
	localCacheSteps = []step{
		askOnce("8 hits", rqh(8, "store", desc("local", "{u}")), allow(okSt(12, uHour, 4))),
		askOnce("at 9", rq("store", desc("local", "{u}")), allow(okSt(12, uHour, 3))),
		askOnce("one more", rq("store", desc("local", "{u}")), allow(okSt(12, uHour, 2))),
		askOnce("at 12", rqh(2, "store", desc("local", "{u}")), allow(okSt(12, uHour, 0))),
		askOnce("over", rq("store", desc("local", "{u}")), deny(overSt(12, uHour))),
		askOnce("over again", rq("store", desc("local", "{u}")), deny(overSt(12, uHour))),
	}
	nearLimitSteps = append(slices2(localCacheSteps),
		askOnce("s20: 2 hits", rqh(2, "store", desc("s20", "{u}a")), allow(okSt(20, uSec, 18))),
		askOnce("s20: 3 more", rqh(3, "store", desc("s20", "{u}a")), allow(okSt(20, uSec, 15))),
		askOnce("s8: 5 hits", rqh(5, "store", desc("s8", "{u}")), allow(okSt(8, uSec, 3))),
		askOnce("s8: 2 more", rqh(2, "store", desc("s8", "{u}")), allow(okSt(8, uSec, 1))),
		askOnce("s20: 16 hits", rqh(16, "store", desc("s20", "{u}b")), allow(okSt(20, uSec, 4))),
		askOnce("s20: 3 more", rqh(3, "store", desc("s20", "{u}b")), allow(okSt(20, uSec, 1))),
		askOnce("s20: 3 more, over", rqh(3, "store", desc("s20", "{u}b")), deny(overSt(20, uSec))),
		askOnce("s20: 15 hits", rqh(15, "store", desc("s20", "{u}c")), allow(okSt(20, uSec, 5))),
		askOnce("s20: 7 more, over", rqh(7, "store", desc("s20", "{u}c")), deny(overSt(20, uSec))),
		askOnce("s10: 10 hits", rqh(10, "store", desc("s10", "{u}")), allow(okSt(10, uSec, 0))),
		askOnce("s10: 3 more, over", rqh(3, "store", desc("s10", "{u}")), deny(overSt(10, uSec))),
	)
	shadowRuleSteps = []step{
		askOnce("8 hits", rqh(8, "store", desc("local_shadow", "{u}")), allow(okSt(12, uHour, 4))),
		askOnce("at 10", rqh(2, "store", desc("local_shadow", "{u}")), allow(okSt(12, uHour, 2))),
		// Past the limit: the reference adds the 3 hits (15 of 12) and a
		// shadow rule answers OK with 0 left; Sluice does not add hits
		// that do not fit, so 2 are left, then 1.
		{what: "past the limit: shadow", req: rqh(3, "store", desc("local_shadow", "{u}")),
			want: always(allow(okSt(12, uHour, 0))), dflt: always(allow(okSt(12, uHour, 2)))},
		{what: "again", req: rq("store", desc("local_shadow", "{u}")),
			want: always(allow(okSt(12, uHour, 0))), dflt: always(allow(okSt(12, uHour, 1)))},
	}
	stopSteps = []step{
		askOnce("11 hits each", rq("store", dh(11, "stop_a", "{u}"), dh(11, "stop_b", "{u}")), allow(okSt(15, uHour, 4), okSt(14, uHour, 3))),
		askOnce("2 more each", rq("store", dh(2, "stop_a", "{u}"), dh(2, "stop_b", "{u}")), allow(okSt(15, uHour, 2), okSt(14, uHour, 1))),
		askOnce("a read, and 2 more past the limit", rq("store", dh(0, "stop_a", "{u}"), dh(2, "stop_b", "{u}")), deny(okSt(15, uHour, 2), overSt(14, uHour))),
		askOnce("stop_a was not counted", rq("store", dh(0, "stop_a", "{u}")), allow(okSt(15, uHour, 2))),
	}
)

// slices2 copies steps, so that appending to them shares nothing.
func slices2(s []step) []step { return append([]step(nil), s...) }

// The limiter's statuses from a count (base_limiter_test.go's
// TestGetResponseStatus*), each reached by real hits.
func limiterCase(name string, steps ...step) suiteCase {
	return suiteCase{name: "limiter/" + name, config: "cache", modes: bothModes, window: 3600, steps: steps}
}

// limiterBurnCase is a limiter case whose counter the reference takes
// past its limit: a difference of the default mode.
func limiterBurnCase(name string, steps ...step) suiteCase {
	c := limiterCase(name, steps...)
	c.burn, c.anchor = true, differences
	return c
}

// badConfig is a config test of a file the reference refuses: serve
// refuses to start, naming what.
func badConfig(test, dir, what string) suiteCase {
	return suiteCase{name: "config/" + test, config: "bad/" + dir, modes: bothModes, fails: what}
}

// jsonBody is a RateLimitRequest in protojson.
func jsonBody(domain, key, value string) string {
	return fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, domain, key, value)
}

var envoySuite = slices.Concat(suiteCases,
	redisVariants("TestBasicAuthConfig", "auth", "Auth"),
	redisVariants("TestBasicTLSConfig", "tls", "TLS"),
	redisVariants("TestBasicAuthConfigWithRedisCluster", "cluster", "Auth"),
	redisVariants("TestBasicAuthConfigWithRedisSentinel", "sentinel", "Auth"),
)

var suiteCases = []suiteCase{
	// I. test/integration/integration_test.go
	basicCase("TestBasicConfig/WithoutPerSecondRedis", nil, false),
	basicCase("TestBasicConfig/WithPerSecondRedis", perSecondEnv, false),
	basicCase("TestBasicConfig/WithoutPerSecondRedisWithLocalCache", localOn, false),
	basicCase("TestBasicConfig/WithPerSecondRedisWithLocalCache", with(perSecondEnv, localOn), false),
	basicCase("TestBasicConfig/WithoutPerSecondRedisWithCachePrefix", map[string]string{"CACHE_KEY_PREFIX": "tally:"}, false),
	basicCase("TestBasicConfig/WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", stopOn, true),
	basicCase("TestBasicConfig/WithPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", with(perSecondEnv, stopOn), true),
	basicCase("TestBasicConfig/WithoutPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", with(localOn, stopOn), true),
	basicCase("TestBasicConfig/WithPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", with(perSecondEnv, localOn, stopOn), true),
	basicCase("TestBasicReloadConfig/BasicWithoutWatchRoot", map[string]string{"RUNTIME_WATCH_ROOT": "false"}, false),
	{name: "integration/TestBasicReloadConfig/ReloadWithoutWatchRoot", config: "basic", modes: bothModes,
		env: map[string]string{"RUNTIME_WATCH_ROOT": "false"}, steps: reloadSteps},
	// The four subtests of TestReloadGRPCServerCerts, in order: the
	// reference's GRPC_SERVER_TLS_* are Sluice's --tls-cert and --tls-key
	// (the compatible mode does not map those variables: docs/envoy.md).
	{name: "integration/TestReloadGRPCServerCerts", config: "basic", modes: []string{modeDefault}, tls: true, steps: []step{
		act("WithInitialCert", tlsHandshake("a", true)),
		act("WithNewCertFail", tlsHandshake("b", false)),
		act("the certificate is replaced", swapCertificate),
		act("WithNewCertOK", tlsHandshake("b", true)),
		act("WithInitialCertFail", tlsHandshake("a", false)),
	}},
	{name: "integration/TestShareThreshold", config: "share", modes: bothModes, window: 3600, steps: shareSteps},
	{name: "integration/TestBasicConfigMemcache (refused)", config: "basic", modes: []string{modeCompat},
		env: map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "127.0.0.1:11211"}, fails: "BACKEND_TYPE"},
	{name: "integration/TestXdsProviderBasicConfig (refused)", config: "basic", modes: []string{modeCompat},
		env: map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, fails: "CONFIG_TYPE"},

	// II. integration-test/scripts/*.sh, as the calls Envoy makes.
	{name: "scripts/simple-get.sh", config: "scripts", modes: bothModes, steps: []step{
		askOnce("one request", rq("edge", desc("team", "qa", "mood", "calm")), allow(okSt(10, uMin, 9))),
	}},
	{name: "scripts/trigger-ratelimit.sh", config: "scripts", modes: bothModes, window: 60, steps: []step{
		ask("four requests", 4, rq("edge", desc("team", "{u}", "mood", "tense")), countdown(3, uMin)),
	}},
	{name: "scripts/trigger-shadow-mode-key.sh", config: "scripts", modes: bothModes, window: 60, steps: []step{
		ask("five requests", 5, rq("edge", desc("team", "{u}", "mood", "sandbox")), func(i int) answer {
			return allow(okSt(3, uMin, uint32(max(2-i, 0))))
		}),
	}},
	{name: "scripts/replaces.sh", config: "scripts", modes: bothModes, window: 60, anchor: differences, steps: replacesSteps},
	{name: "scripts/value-included-in-stats-key-when-unspecified.sh", config: "scripts", modes: bothModes, window: 60, steps: []step{
		ask("three requests", 3, rq("edge", desc("tag", "{u}")), countdown(2, uMin)),
	}},
	{name: "scripts/quota.sh", config: "scripts-quota", modes: bothModes, window: 1, needs: []string{"envoy-quota-mode"}, steps: []step{
		askOnce("1", rq("metered", desc("svc", "one"), desc("svc", "two")), allow(okSt(1, uSec, 0), okSt(2, uSec, 1))),
		askOnce("2: one quota over", rq("metered", desc("svc", "one"), desc("svc", "two")), allow(overSt(1, uSec), okSt(2, uSec, 0))),
		askOnce("3: every quota over", rq("metered", desc("svc", "one"), desc("svc", "two")), deny(overSt(1, uSec), overSt(2, uSec))),
		act("the window turns", nextWindow),
		askOnce("4: a new window", rq("metered", desc("svc", "one"), desc("svc", "two")), allow(okSt(1, uSec, 0), okSt(2, uSec, 1))),
	}},
	{name: "scripts/token-quota.sh", config: "scripts-quota", modes: bothModes, window: 1, needs: []string{"envoy-quota-mode"}, burn: true, anchor: differences, steps: []step{
		askOnce("1: read", rq("metered", svcTwoRead), allow(okSt(2, uSec, 2))),
		askOnce("1: done", rq("metered", dh(1, "svc", "two")), allow(okSt(2, uSec, 1))),
		askOnce("2: read", rq("metered", svcTwoRead), allow(okSt(2, uSec, 1))),
		askOnce("2: done", rq("metered", dh(1, "svc", "two")), allow(okSt(2, uSec, 0))),
		askOnce("3: read", rq("metered", svcTwoRead), allow(okSt(2, uSec, 0))),
		askOnce("3: done, over", rq("metered", dh(1, "svc", "two")), deny(overSt(2, uSec))),
		{what: "4: read", req: rq("metered", svcTwoRead), want: always(deny(overSt(2, uSec))), dflt: always(allow(okSt(2, uSec, 0)))},
		act("the window turns", nextWindow),
		askOnce("5: read", rq("metered", svcTwoRead), allow(okSt(2, uSec, 2))),
	}},
	{name: "scripts/multiservice-tokenquota.sh", config: "scripts-quota", modes: bothModes, window: 1, burn: true, anchor: differences,
		env: metadataMode, flags: []string{"--envoy-dynamic-metadata"}, needs: []string{"envoy-quota-mode"}, steps: multiserviceSteps},

	// III. test/config/config_test.go
	{name: "config/TestBasicConfig", config: "catalog", modes: bothModes, steps: []step{
		askOnce("a value with no rule of its own", rq("catalog", desc("shelf", "top")), allow(noRule())),
		askOnce("nested, a value", rq("catalog", desc("shelf", "top", "item", "lamp")), allow(okSt(5, uSec, 4))),
		askOnce("nested, the key alone", rq("catalog", desc("shelf", "top", "item", "vase")), allow(okSt(8, uMin, 7))),
		askOnce("a named rule", rq("catalog", desc("shelf", "low")), allow(okSt(12, uHour, 11))),
		askOnce("below a named rule", rq("catalog", desc("shelf", "low", "bin", "deep")), allow(okSt(30, uDay, 29))),
		askOnce("deeper than a rule", rq("catalog", desc("shelf", "low", "bin", "shallow")), allow(noRule())),
		askOnce("the key alone", rq("catalog", desc("shelf", "middle")), allow(okSt(6, uMin, 5))),
		askOnce("unlimited", rq("catalog", desc("aisle", "7")), allow(unlimitedSt())),
		askOnce("nested under a key with no rule", rq("catalog", desc("dock", "1", "bay", "nine")), allow(okSt(9, uDay, 8))),
		askOnce("a key with no rule", rq("catalog", desc("dock", "1")), allow(noRule())),
		askOnce("a key not configured", rq("catalog", desc("door", "1")), allow(noRule())),
		askOnce("another domain", rq("elsewhere", desc("shelf", "top")), allow(noRule())),
	}},
	{name: "config/TestDomainMerge", config: "merge", modes: bothModes,
		env: map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, flags: []string{"--envoy-merge-domains"}, steps: []step{
			askOnce("the first file's key", rq("merged", desc("north", "x")), allow(okSt(4, uMin, 3))),
			askOnce("the second file's key", rq("merged", desc("south", "x")), allow(okSt(6, uHour, 5))),
		}},
	{name: "config/TestDuplicateKeyDomainMerge", config: "merge-dup", modes: bothModes,
		env: map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, flags: []string{"--envoy-merge-domains"}, fails: "north"},
	{name: "config/TestConfigLimitOverride", config: "catalog", modes: bothModes, steps: []step{
		askOnce("a request's limit", rq("catalog", dl(7, typepb.RateLimitUnit_DAY, "anything", "x")), allow(okSt(7, uDay, 6))),
		askOnce("another limit of the request", rq("catalog", dl(33, typepb.RateLimitUnit_HOUR, "anything", "x")), allow(okSt(33, uHour, 32))),
		askOnce("over a rule", rq("catalog", dl(2, typepb.RateLimitUnit_HOUR, "shelf", "middle")), allow(okSt(2, uHour, 1))),
		askOnce("a domain not configured: ignored", rq("elsewhere", dl(1, typepb.RateLimitUnit_HOUR, "anything", "x")), allow(noRule())),
		askOnce("again: nothing was counted", rq("elsewhere", dl(1, typepb.RateLimitUnit_HOUR, "anything", "x")), allow(noRule())),
	}},
	badConfig("TestEmptyDomain", "empty-domain", "empty-domain.yaml"),
	badConfig("TestDuplicateDomain", "dup-domain", "twice"),
	badConfig("TestEmptyKey", "empty-key", "empty-key.yaml"),
	badConfig("TestDuplicateKey", "dup-key", "dup-key.yaml"),
	badConfig("TestBadLimitUnit", "bad-unit", "bad-unit.yaml"),
	badConfig("TestReplacesSelf", "replaces-self", "replaces-self.yaml"),
	badConfig("TestReplacesEmpty", "replaces-empty", "replaces-empty.yaml"),
	badConfig("TestBadYaml", "bad-yaml", "bad-yaml.yaml"),
	badConfig("TestMisspelledKey", "misspelled", "misspelled.yaml"),
	badConfig("TestMisspelledKey/second file", "misspelled2", "misspelled2.yaml"),
	badConfig("TestNonStringKey", "non-string-key", "non-string-key.yaml"),
	badConfig("TestNonMapList", "non-map-list", "non-map-list.yaml"),
	badConfig("TestUnlimitedWithRateLimitUnit", "unlimited-unit", "unlimited-unit.yaml"),
	{name: "config/TestShadowModeConfig", config: "shadow-config", modes: bothModes, window: 60, steps: []step{
		ask("a shadow rule", 2, rq("dim", desc("lamp", "{u}")), func(i int) answer { return allow(okSt(1, uMin, 0)) }),
		ask("a nested shadow rule", 2, rq("dim", desc("room", "{u}", "lamp", "x")), func(i int) answer { return allow(okSt(1, uMin, 0)) }),
	}},
	{name: "config/TestWildcardConfig", config: "glob", modes: bothModes, steps: []step{
		askOnce("an exact value wins", rq("glob", desc("route", "api/health")), allow(okSt(9, uMin, 8))),
		askOnce("a wildcard", rq("glob", desc("route", "api/v1/items")), allow(okSt(4, uMin, 3))),
		askOnce("a wildcard, each value its own counter", rq("glob", desc("route", "api/v2/items")), allow(okSt(4, uMin, 3))),
		askOnce("the key alone", rq("glob", desc("route", "web/home")), allow(okSt(2, uMin, 1))),
	}},
	{name: "config/TestShareThreshold/Basic share_threshold", config: "share", modes: bothModes, window: 3600, steps: shareSteps[:3]},
	{name: "config/TestShareThreshold/Explicit value precedence", config: "share", modes: bothModes, window: 3600, steps: []step{
		askOnce("docs/index: its own rule", rq("bucket", desc("path", "docs/index")), allow(okSt(3, uHour, 2))),
		askOnce("docs/other: the shared rule", rq("bucket", desc("path", "docs/other")), allow(okSt(8, uHour, 7))),
		askOnce("docs/index did not count in the shared one", rq("bucket", desc("path", "docs/more")), allow(okSt(8, uHour, 6))),
	}},
	{name: "config/TestMetadata", config: "meta", modes: bothModes, steps: []step{
		askOnce("a rule with metadata loads", rq("tagged", desc("badge", "x")), allow(okSt(5, uMin, 4))),
	}},

	// IV. test/service/ratelimit_test.go
	{name: "service/TestService", config: "service-before", modes: bothModes, window: 60, steps: []step{
		askOnce("no rule yet", rq("desk", desc("alpha", "x")), allow(noRule())),
		act("a reload", putFile("service-later/desk.yaml", "desk.yaml")),
		act("brings the rule", waitAnswer(rq("desk", dh(0, "alpha", "x")), allow(okSt(10, uMin, 10)))),
		ask("to the limit", 10, rq("desk", desc("alpha", "y"), omega), func(i int) answer {
			return allow(okSt(10, uMin, 9-uint32(i)), noRule())
		}),
		askOnce("over", rq("desk", desc("alpha", "y"), omega), deny(overSt(10, uMin), noRule())),
		act("a reload that fails", putFile("service-later/broken.yaml", "broken.yaml")),
		act("a few polls", settle),
		askOnce("the configuration stays, in either order", rq("desk", omega, desc("alpha", "y")), deny(noRule(), overSt(10, uMin))),
	}},
	{name: "service/TestServiceGlobalShadowMode", config: "service", modes: bothModes, window: 60,
		env: shadowMode, flags: []string{"--envoy-shadow-mode"}, steps: []step{
			overAlpha,
			askOnce("over, in shadow mode", rq("desk", alpha, omega), allow(overSt(10, uMin), noRule())),
		}},
	{name: "service/TestRuleShadowMode", config: "service", modes: bothModes, window: 60, steps: []step{
		ask("two shadow rules", 11, rq("shade", desc("left", "{u}"), desc("right", "{u}")), func(i int) answer {
			return allow(okSt(10, uMin, uint32(max(9-i, 0))), okSt(10, uMin, uint32(max(9-i, 0))))
		}),
	}},
	{name: "service/TestMixedRuleShadowMode", config: "service", modes: bothModes, window: 60, steps: []step{
		ask("a shadow rule and a rule", 11, rq("shade_mix", desc("left", "{u}"), desc("right", "{u}")), func(i int) answer {
			if i < 10 {
				return allow(okSt(10, uMin, 9-uint32(i)), okSt(10, uMin, 9-uint32(i)))
			}
			return deny(okSt(10, uMin, 0), overSt(10, uMin))
		}),
	}},
	{name: "service/TestServiceWithCustomRatelimitHeaders", config: "service", modes: bothModes, window: 60,
		env: map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "Tally-Limit",
			"LIMIT_REMAINING_HEADER": "Tally-Remaining", "LIMIT_RESET_HEADER": "Tally-Reset"},
		flags: []string{"--envoy-response-headers", "--envoy-header-limit", "Tally-Limit",
			"--envoy-header-remaining", "Tally-Remaining", "--envoy-header-reset", "Tally-Reset"},
		steps: []step{
			overAlpha,
			askOnce("over", rq("desk", alpha, omega), answer{code: over, statuses: []wantSt{overSt(10, uMin), noRule()},
				headers: map[string]string{"Tally-Limit": "10", "Tally-Remaining": "0", "Tally-Reset": "*"}}),
		}},
	{name: "service/TestServiceWithDefaultRatelimitHeaders", config: "service", modes: bothModes, window: 60,
		env: map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, flags: []string{"--envoy-response-headers"},
		steps: []step{
			overAlpha,
			askOnce("over", rq("desk", alpha, omega), answer{code: over, statuses: []wantSt{overSt(10, uMin), noRule()},
				headers: map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "*"}}),
		}},
	{name: "service/TestEmptyDomain", config: "service", modes: bothModes, flags: []string{"--envoy-reference-errors"}, steps: []step{
		askOnce("no domain", rq("", desc("alpha", "x")), failure(codes.Unknown, "rate limit domain must not be empty")),
	}},
	{name: "service/TestEmptyDescriptors", config: "service", modes: bothModes, flags: []string{"--envoy-reference-errors"}, steps: []step{
		askOnce("no descriptors", rq("desk"), failure(codes.Unknown, "rate limit descriptor list must not be empty")),
	}},
	{name: "service/TestCacheError", config: "service", modes: bothModes, redis: "plain", flags: []string{"--envoy-reference-errors"}, steps: []step{
		askOnce("the store answers", rq("desk", desc("alpha", "x")), allow(okSt(10, uMin, 9))),
		act("the store fails", stopRedis),
		askOnce("an error", rq("desk", desc("alpha", "x")), failure(codes.Unknown, "")),
	}},
	{name: "service/TestInitialLoadError", config: "bad-initial", modes: bothModes,
		env: map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, flags: []string{"--envoy-start-without-config"}, steps: []step{
			askOnce("no configuration", rq("desk", desc("alpha", "x")), failure(codes.Unknown, "no rate limit configuration loaded")),
			act("a good file", putFile("service/desk.yaml", "desk.yaml")),
			act("loads", waitAnswer(rq("desk", dh(0, "alpha", "x")), allow(okSt(10, uMin, 10)))),
		}},
	{name: "service/TestUnlimited", config: "service", modes: bothModes, steps: []step{
		askOnce("a limit, no rule, unlimited", rq("desk", desc("alpha", "x"), omega, desc("free", "y")), allow(okSt(10, uMin, 9), noRule(), unlimitedSt())),
	}},
	{name: "service/TestServiceHealthStatus", config: "service", modes: bothModes, steps: []step{
		act("ratelimit serving", healthIs("ratelimit", healthpb.HealthCheckResponse_SERVING)),
	}},
	{name: "service/TestServiceHealthStatusAtLeastOneConfigLoaded", modes: bothModes,
		env: map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, flags: []string{"--envoy-health-needs-config"}, steps: []step{
			act("no configuration: not serving", healthIs("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)),
			act("a file", putFile("service/desk.yaml", "desk.yaml")),
			act("serving", healthIs("ratelimit", healthpb.HealthCheckResponse_SERVING)),
			act("the file goes", removeFile("desk.yaml")),
			act("not serving again", healthIs("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)),
		}},
	{name: "service/TestServiceGlobalQuotaMode", config: "quota", modes: bothModes, window: 60,
		env: quotaMode, flags: []string{"--envoy-quota-mode"},
		steps: quotaSteps("g1", 10, 10, "g2", 5, 5, deny(overSt(10, uMin), overSt(5, uMin)), answer{})},
	{name: "service/TestMetadataReturnedForPassedDescriptors", config: "meta", modes: bothModes, window: 60,
		env: with(quotaMode, metadataMode), flags: []string{"--envoy-quota-mode", "--envoy-dynamic-metadata"},
		steps: metaSteps("gold", 10, 4, "silver", 5, 5, answer{code: ok, statuses: []wantSt{okSt(10, uMin, 5), overSt(5, uMin)},
			meta: map[string]string{"domain": "tagged", "metadata.tier": "gold", "hitsAddend": "-"}})},
	{name: "service/TestMetadataReturnedForAllPassedDescriptors", config: "meta", modes: bothModes, window: 60,
		env: with(quotaMode, metadataMode), flags: []string{"--envoy-quota-mode", "--envoy-dynamic-metadata"},
		steps: metaSteps("gold", 10, 5, "east", 10, 4, answer{code: ok, statuses: []wantSt{okSt(10, uMin, 4), okSt(10, uMin, 5)},
			meta: map[string]string{"metadata.tier": "gold", "metadata.zone": "east"}})},
	{name: "service/TestOverlappingMetadataReturnsTheFirstValue", config: "meta", modes: bothModes, window: 60,
		env: with(quotaMode, metadataMode), flags: []string{"--envoy-quota-mode", "--envoy-dynamic-metadata"},
		steps: metaSteps("gold", 10, 5, "silver", 5, 3, answer{code: ok, statuses: []wantSt{okSt(10, uMin, 4), okSt(5, uMin, 1)},
			meta: map[string]string{"metadata.tier": "gold"}})},
	{name: "service/TestServicePerDescriptorQuotaMode", config: "quota", modes: bothModes, window: 60, anchor: differences,
		needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("reg", 5, 5, "quo", 3, 2, deny(overSt(5, uMin), okSt(3, uMin, 0)), deny(overSt(5, uMin), okSt(3, uMin, 1)))},
	{name: "service/TestServiceMixedPerDescriptorModes", config: "quota", modes: bothModes, window: 60, anchor: differences,
		needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("reg", 5, 4, "quo", 3, 3, deny(okSt(5, uMin, 0), overSt(3, uMin)), deny(okSt(5, uMin, 1), overSt(3, uMin)))},
	{name: "service/TestServiceMixedPerDescriptorModesUnderLimit", config: "quota", modes: bothModes, window: 60,
		needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("reg", 5, 4, "quo", 3, 2, allow(okSt(5, uMin, 0), okSt(3, uMin, 0)), answer{})},
	{name: "service/TestServiceQuotaModeOnlyAllOverTheLimit", config: "quota", modes: bothModes, window: 60,
		needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("q1", 5, 5, "q2", 3, 3, deny(overSt(5, uMin), overSt(3, uMin)), answer{})},
	{name: "service/TestServiceQuotaModeOnlySomeOverTheLimit", config: "quota", modes: bothModes, window: 60,
		needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("q1", 5, 5, "q2", 3, 2, allow(overSt(5, uMin), okSt(3, uMin, 0)), answer{})},
	{name: "service/TestServiceQuotaModeWithShadowMode", config: "quota", modes: bothModes, window: 60,
		env: shadowMode, flags: []string{"--envoy-shadow-mode"}, needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("q1", 5, 5, "q2", 3, 3, allow(overSt(5, uMin), overSt(3, uMin)), answer{})},
	{name: "service/TestServiceMixedModeWithShadowMode", config: "quota", modes: bothModes, window: 60,
		env: shadowMode, flags: []string{"--envoy-shadow-mode"}, needs: []string{"envoy-quota-mode"},
		steps: quotaSteps("reg", 5, 5, "quo", 3, 3, allow(overSt(5, uMin), overSt(3, uMin)), answer{})},

	// V. test/redis/fixed_cache_impl_test.go, test/memcached/cache_impl_test.go,
	// test/limiter/base_limiter_test.go
	{name: "redis/TestRedis/WithoutPerSecondRedis", config: "cache", modes: bothModes, window: 1, burn: true, anchor: differences, steps: redisSteps},
	{name: "redis/TestRedis/WithPerSecondRedis", config: "cache", modes: bothModes, window: 1, burn: true, anchor: differences,
		env: perSecondEnv, steps: redisSteps},
	{name: "redis/TestOverLimitWithLocalCache", config: "cache", modes: bothModes, window: 3600, env: localOn, steps: localCacheSteps},
	{name: "redis/TestNearLimit", config: "cache", modes: bothModes, window: 1, steps: nearLimitSteps},
	{name: "redis/TestOverLimitWithLocalCacheShadowRule", config: "cache", modes: bothModes, window: 3600, env: localOn, burn: true, anchor: differences, steps: shadowRuleSteps},
	{name: "redis/TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig", config: "cache", modes: bothModes, window: 3600, env: stopOn, steps: stopSteps},
	{name: "memcached/TestMemcached", config: "cache", modes: bothModes, window: 1, burn: true, anchor: differences, steps: redisSteps},
	{name: "memcached/TestMemcachedGetError", config: "cache", modes: bothModes, window: 60, steps: []step{
		askOnce("a first hit", rq("store", desc("slow", "{u}")), allow(okSt(10, uMin, 9))),
	}},
	{name: "memcached/TestOverLimitWithLocalCache", config: "cache", modes: bothModes, window: 3600, env: localOn, steps: localCacheSteps},
	{name: "memcached/TestNearLimit", config: "cache", modes: bothModes, window: 1, steps: nearLimitSteps},
	limiterCase("TestGetResponseStatusEmptyKey", askOnce("no rule", rq("store", desc("unknown", "x")), allow(noRule()))),
	limiterCase("TestGetResponseStatusOverLimitWithLocalCache",
		askOnce("at the limit", rqh(12, "store", desc("local", "a")), allow(okSt(12, uHour, 0))),
		askOnce("over", rq("store", desc("local", "a")), deny(overSt(12, uHour))),
		askOnce("over again", rq("store", desc("local", "a")), deny(overSt(12, uHour)))),
	limiterCase("TestGetResponseStatusOverLimitWithLocalCacheShadowMode",
		askOnce("at the limit", rqh(12, "store", desc("local_shadow", "a")), allow(okSt(12, uHour, 0))),
		askOnce("over: shadow", rq("store", desc("local_shadow", "a")), allow(okSt(12, uHour, 0))),
		askOnce("again", rq("store", desc("local_shadow", "a")), allow(okSt(12, uHour, 0)))),
	limiterCase("TestGetResponseStatusOverLimit",
		askOnce("at 10 of 12", rqh(10, "store", desc("local", "b")), allow(okSt(12, uHour, 2))),
		askOnce("3 more: over", rqh(3, "store", desc("local", "b")), deny(overSt(12, uHour)))),
	limiterBurnCase("TestGetResponseStatusOverLimitShadowMode",
		askOnce("at 10 of 12", rqh(10, "store", desc("local_shadow", "b")), allow(okSt(12, uHour, 2))),
		step{what: "3 more: shadow", req: rqh(3, "store", desc("local_shadow", "b")),
			want: always(allow(okSt(12, uHour, 0))), dflt: always(allow(okSt(12, uHour, 2)))}),
	limiterCase("TestGetResponseStatusBelowLimit",
		askOnce("5 of 12", rqh(5, "store", desc("local", "c")), allow(okSt(12, uHour, 7))),
		askOnce("6 of 12", rq("store", desc("local", "c")), allow(okSt(12, uHour, 6)))),
	limiterCase("TestGetResponseStatusBelowLimitShadowMode",
		askOnce("5 of 12", rqh(5, "store", desc("local_shadow", "c")), allow(okSt(12, uHour, 7))),
		askOnce("6 of 12", rq("store", desc("local_shadow", "c")), allow(okSt(12, uHour, 6)))),

	// VI. test/server/*: health and the JSON endpoint, the compatible
	// mode's (gRPC health in both).
	{name: "server/TestHealthCheck", config: "service", modes: []string{modeCompat}, redis: "plain", steps: []step{
		act("healthy", httpCall("GET", "/healthcheck", "", 200, "OK")),
		act("the store fails", stopRedis),
		act("unhealthy", httpCall("GET", "/healthcheck", "", 500, "")),
		act("the store is back", restartRedis),
		act("healthy again", httpCall("GET", "/healthcheck", "", 200, "OK")),
	}},
	{name: "server/TestHealthyWithAtLeastOneConfigLoaded", modes: []string{modeCompat},
		env: map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, steps: []step{
			act("no configuration: unhealthy", httpCall("GET", "/healthcheck", "", 500, "")),
			act("a file", putFile("service/desk.yaml", "desk.yaml")),
			act("healthy", httpCall("GET", "/healthcheck", "", 200, "OK")),
		}},
	{name: "server/TestGrpcHealthCheck", config: "service", modes: bothModes, redis: "plain", steps: []step{
		act("ratelimit serving", healthIs("ratelimit", healthpb.HealthCheckResponse_SERVING)),
		act("the whole server serving", healthIs("", healthpb.HealthCheckResponse_SERVING)),
		act("the store fails", stopRedis),
		act("ratelimit not serving", healthIs("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)),
		act("nor the whole server", healthIs("", healthpb.HealthCheckResponse_NOT_SERVING)),
		act("the store is back", restartRedis),
		act("ratelimit serving again", healthIs("ratelimit", healthpb.HealthCheckResponse_SERVING)),
		act("the whole server again", healthIs("", healthpb.HealthCheckResponse_SERVING)),
	}},
	{name: "server/TestGrpcHealthyWithAtLeastOneConfigLoaded", modes: bothModes,
		env: map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, flags: []string{"--envoy-health-needs-config"}, steps: []step{
			act("no configuration: not serving", healthIs("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)),
			act("nor the whole server", healthIs("", healthpb.HealthCheckResponse_NOT_SERVING)),
			act("a file", putFile("service/desk.yaml", "desk.yaml")),
			act("serving", healthIs("ratelimit", healthpb.HealthCheckResponse_SERVING)),
		}},
	{name: "server/TestJsonHandler", config: "service", modes: []string{modeCompat}, window: 60, steps: []step{
		act("OK", httpCall("POST", "/json", jsonBody("desk", "alpha", "json"), 200, `"overallCode":"OK"`)),
		overAlpha,
		act("OVER_LIMIT", httpCall("POST", "/json", jsonBody("desk", "alpha", "{u}"), 429, `"overallCode":"OVER_LIMIT"`)),
		act("bad JSON", httpCall("POST", "/json", `{"domain":`, 400, "Bad")),
		// A service error (here an empty domain) is 400, as the reference's handler answers every error of the service.
		act("an error", httpCall("POST", "/json", jsonBody("", "alpha", "x"), 400, "Bad")),
	}},
}
