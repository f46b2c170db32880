package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/testcert"
)

// The reference's suite (envoyproxy/ratelimit's tests that check what
// ShouldRateLimit answers), reproduced against a real sluice serve over
// gRPC, with our own YAML (testdata/envoysuite, one directory per
// configuration). docs/design/envoy-suite.md maps each reference test to
// the case that reproduces it. Each case runs in the modes it lists:
//
//   - compat: sluice serve --envoy-compat, configured by the reference's
//     environment variables as its test sets them; the answer is the
//     reference's, always;
//   - default: sluice serve with --grpc-addr and --envoy-config (and the
//     behaviour flags the case needs); the answer is the reference's but
//     where the case declares a difference documented in docs/envoy.md
//     (all-or-nothing, denied hits not burnt).
//
// A case whose flags this binary lacks is skipped, naming them (issue 27
// builds them on other branches), except under CI=true, where it fails.

const (
	modeCompat  = "compat"
	modeDefault = "default"
)

var bothModes = []string{modeCompat, modeDefault}

// suiteCase is one reference test reproduced.
type suiteCase struct {
	name   string            // the reference test: "group/TestName[/subtest]"
	config string            // directory of testdata/envoysuite with the YAML in force at start
	modes  []string          // the modes it runs in
	env    map[string]string // compat: the reference's variables its test sets
	flags  []string          // default: the behaviour flags the case needs
	needs  []string          // flags both modes need besides those (a YAML key built with one, say)
	redis  string            // "": the memory store; "plain" or "auth": --store redis on a redis-server of its own
	window int64             // seconds: the requests run within one window of this length, anew with fresh values otherwise
	anchor string            // the docs/envoy.md anchor documenting the default mode's difference
	fails  string            // serve refuses to start, its log naming this
	tls    bool              // default: --tls-cert and --tls-key, a certificate of the run's own, replaceable by another
	burn   bool              // compat: the reference's counting burns denied hits (the engine's Burn, --envoy-counting reference)
	steps  []step
}

// step is a request sent n times (or an action), and the answers wanted.
type step struct {
	what string
	n    int                     // times; 0 is 1
	req  *rlspb.RateLimitRequest // "{u}" in a value is the attempt's own token
	want func(i int) answer      // the reference's answer to the i-th
	dflt func(i int) answer      // the default mode's, where it differs (the case's anchor)
	do   func(r *suiteRun) error // an action instead of a request
}

// answer is a ShouldRateLimit answer wanted.
type answer struct {
	code     rlspb.RateLimitResponse_Code
	statuses []wantSt
	headers  map[string]string // when not nil: exactly these headers
	meta     map[string]string // when not nil: these dynamic metadata paths ("-" absent)
	err      codes.Code        // an error instead (not OK)
	errText  string
}

// wantSt is a descriptor's status wanted.
type wantSt struct {
	code  rlspb.RateLimitResponse_Code
	limit uint32 // 0 with no unit: no current_limit
	unit  rlspb.RateLimitResponse_RateLimit_Unit
	left  uint32
	none  bool // no current_limit
}

type unit = rlspb.RateLimitResponse_RateLimit_Unit

const (
	uSec  = rlspb.RateLimitResponse_RateLimit_SECOND
	uMin  = rlspb.RateLimitResponse_RateLimit_MINUTE
	uHour = rlspb.RateLimitResponse_RateLimit_HOUR
	uDay  = rlspb.RateLimitResponse_RateLimit_DAY
)

// Statuses.
func okSt(limit uint32, u unit, left uint32) wantSt {
	return wantSt{code: ok, limit: limit, unit: u, left: left}
}
func overSt(limit uint32, u unit) wantSt { return wantSt{code: over, limit: limit, unit: u} }
func noRule() wantSt                     { return wantSt{code: ok, none: true} }
func unlimitedSt() wantSt                { return wantSt{code: ok, none: true, left: 4294967295} }

// Answers.
func allow(s ...wantSt) answer { return answer{code: ok, statuses: s} }
func deny(s ...wantSt) answer  { return answer{code: over, statuses: s} }
func failure(c codes.Code, text string) answer {
	return answer{err: c, errText: text}
}
func always(a answer) func(int) answer { return func(int) answer { return a } }

// rq is a request of a domain's descriptors, hits_addend 0 (one hit).
func rq(domain string, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// ask is a step of one request sent n times.
func ask(what string, n int, req *rlspb.RateLimitRequest, want func(int) answer) step {
	return step{what: what, n: n, req: req, want: want}
}

// askOnce is a step of one request.
func askOnce(what string, req *rlspb.RateLimitRequest, want answer) step {
	return step{what: what, req: req, want: always(want)}
}

// act is a step that acts.
func act(what string, do func(r *suiteRun) error) step { return step{what: what, do: do} }

// suiteRun is one case running in one mode.
type suiteRun struct {
	t        *testing.T
	c        *suiteCase
	mode     string
	p        *process
	r        *rls
	dir      string // the live configuration directory
	httpAddr string
	grpcAddr string
	redis    *redisServer
	u        string // the attempt's token
	turns    int64  // windows the attempt waited to turn
	tlsDir   string // with tls: the live certificate, and a and b, two of two CAs
}

var serveHelp = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(binary, "serve", "--help").CombinedOutput()
	if len(out) > 0 {
		err = nil // flag's usage exits 2 after printing it
	}
	return string(out), err
})

var flagName = regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`)

// missingFlags returns the flags of names sluice serve lacks.
func missingFlags(t *testing.T, names []string) []string {
	t.Helper()
	help, err := serveHelp()
	if err != nil {
		t.Fatalf("sluice serve --help: %v", err)
	}
	have := map[string]bool{}
	for _, m := range flagName.FindAllStringSubmatch(help, -1) {
		have[m[1]] = true
	}
	var missing []string
	for _, n := range names {
		if !have[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

// envFlag is the flag each reference variable a case sets maps to.
var envFlag = map[string]string{
	"SHADOW_MODE":                             "envoy-shadow-mode",
	"QUOTA_MODE":                              "envoy-quota-mode",
	"RESPONSE_DYNAMIC_METADATA":               "envoy-dynamic-metadata",
	"LIMIT_LIMIT_HEADER":                      "envoy-header-limit",
	"LIMIT_REMAINING_HEADER":                  "envoy-header-remaining",
	"LIMIT_RESET_HEADER":                      "envoy-header-reset",
	"LIMIT_RESPONSE_HEADERS_ENABLED":          "envoy-response-headers",
	"MERGE_DOMAIN_CONFIG":                     "envoy-merge-domains",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "envoy-counting",
	"FORCE_START_WITHOUT_INITIAL_CONFIG":      "envoy-start-without-config",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "envoy-health-needs-config",
}

// needed lists the flags a case needs in a mode.
func (c *suiteCase) needed(mode string) []string {
	needs := slices.Clone(c.needs)
	if c.redis != "" {
		needs = append(needs, "redis-url")
	}
	if mode == modeCompat {
		needs = append(needs, "envoy-compat")
		if c.burn || c.anchor != "" {
			// The reference's counting: where the modes differ, it decides.
			needs = append(needs, "envoy-counting")
		}
		for k := range c.env {
			if f, found := envFlag[k]; found {
				needs = append(needs, f)
			}
		}
	} else {
		for _, f := range c.flags {
			if strings.HasPrefix(f, "--") {
				needs = append(needs, strings.TrimPrefix(strings.SplitN(f, "=", 2)[0], "--"))
			}
		}
	}
	slices.Sort(needs)
	return slices.Compact(needs)
}

// requireFlags skips the case (fails it under CI=true) if sluice serve
// lacks a flag it needs.
func requireFlags(t *testing.T, names []string) {
	t.Helper()
	missing := missingFlags(t, names)
	if len(missing) == 0 {
		return
	}
	msg := "needs --" + strings.Join(missing, ", --") + " (a binary older than the case)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestEnvoySuite runs every case of the reproduced suite in its modes.
func TestEnvoySuite(t *testing.T) {
	for i := range envoySuite {
		c := &envoySuite[i]
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range c.modes {
				t.Run(mode, func(t *testing.T) {
					t.Parallel()
					requireFlags(t, c.needed(mode))
					c.run(t, mode)
				})
			}
		})
	}
}

// TestEnvoySuiteDifferences: the default mode's differences are exactly
// those the cases declare, each with an anchor docs/envoy.md has.
func TestEnvoySuiteDifferences(t *testing.T) {
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := docAnchors(string(doc))
	names := map[string]bool{}
	for _, c := range envoySuite {
		if names[c.name] {
			t.Errorf("%s: two cases of that name", c.name)
		}
		names[c.name] = true
		differs := false
		for _, s := range c.steps {
			differs = differs || s.dflt != nil
		}
		switch {
		case differs && c.anchor == "":
			t.Errorf("%s: the default mode differs, with no docs/envoy.md anchor", c.name)
		case !differs && c.anchor != "":
			t.Errorf("%s: names the anchor %q but declares no difference", c.name, c.anchor)
		case differs && !slices.Contains(c.modes, modeDefault):
			t.Errorf("%s: declares a default-mode difference, and does not run in that mode", c.name)
		case c.anchor != "" && !anchors[c.anchor]:
			t.Errorf("%s: docs/envoy.md has no anchor #%s", c.name, c.anchor)
		}
		if _, err := os.Stat(filepath.Join("testdata/envoysuite", c.config)); c.config != "" && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// docAnchors returns a Markdown file's anchors: its headings' slugs, as
// GitHub makes them, and explicit id attributes.
func docAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
			var b strings.Builder
			for _, r := range strings.ToLower(strings.TrimSpace(h)) {
				switch {
				case r == ' ':
					b.WriteRune('-')
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					b.WriteRune(r)
				}
			}
			anchors[b.String()] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?:id|name)="([^"]+)"`).FindAllStringSubmatch(doc, -1) {
		anchors[m[1]] = true
	}
	return anchors
}

// run starts sluice serve for the case in a mode, and runs its steps.
func (c *suiteCase) run(t *testing.T, mode string) {
	r := &suiteRun{t: t, c: c, mode: mode}
	root := t.TempDir()
	r.dir = filepath.Join(root, "config")
	if mode == modeCompat {
		// The reference's runtime layout: ROOT/SUBDIRECTORY/config.
		r.dir = filepath.Join(root, "current", "ratelimit", "config")
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c.config != "" {
		copyDir(t, filepath.Join("testdata/envoysuite", c.config), r.dir)
	}
	var store []string // the store's flags, or in compat its variables
	switch c.redis {
	case "":
		store = []string{"--store", "memory"}
	default:
		r.redis = startRedis(t, c.redis)
		deadline, err := filepath.Abs("testdata/envoysuite/redis-deadline.yaml")
		if err != nil {
			t.Fatal(err)
		}
		store = []string{"--config", deadline}
		if mode != modeCompat {
			store = append(store, "--store", "redis", "--redis-url", r.redis.url())
			if r.redis.ca != "" {
				store = append(store, "--redis-ca", r.redis.ca)
			}
		}
	}
	if c.tls {
		r.tlsDir = filepath.Join(root, "tls")
		for i, d := range []string{"a", "b"} {
			if err := os.MkdirAll(filepath.Join(r.tlsDir, d), 0o755); err != nil {
				t.Fatal(err)
			}
			ca := testcert.NewCA(t)
			ca.WriteCA(t, filepath.Join(r.tlsDir, d, "ca.pem"))
			ca.Issue(t, int64(i+1), filepath.Join(r.tlsDir, d, "cert.pem"), filepath.Join(r.tlsDir, d, "key.pem"))
		}
		copyDir(t, filepath.Join(r.tlsDir, "a"), r.tlsDir)
		store = append(store, "--tls-cert", filepath.Join(r.tlsDir, "cert.pem"), "--tls-key", filepath.Join(r.tlsDir, "key.pem"))
	}
	p, err := r.launch(root, store)
	if c.fails != "" {
		if err == nil {
			t.Fatalf("serve started; want it refused, naming %q", c.fails)
		}
		if !strings.Contains(p.log(), c.fails) {
			t.Errorf("serve refused to start without naming %q:\n%s", c.fails, p.log())
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	r.r = dialRLS(t, r.grpcAddr)
	for attempt := 0; ; attempt++ {
		r.u, r.turns = fmt.Sprintf("u%d", attempt), 0
		if w := c.window; w == 1 {
			// Start a fresh second: a second's counters are new in it.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
		} else if w > 1 {
			// Start away from the window's end: a case takes a second or
			// two, and a straddle starts it again.
			if left := time.Duration(w-time.Now().Unix()%w) * time.Second; left < 10*time.Second {
				time.Sleep(left)
			}
		}
		start := time.Now()
		errs := r.steps()
		if w := c.window; w > 0 && start.Unix()/w+r.turns != time.Now().Unix()/w && attempt < 5 {
			t.Logf("attempt %d straddled a window of %ds: again with fresh values", attempt, w)
			continue
		}
		for _, e := range errs {
			t.Error(e)
		}
		return
	}
}

// launch starts sluice serve in the run's mode, on free ports: anew on
// others if one was taken meanwhile (another test's process may take a
// port between freeAddr and serve's listen).
func (r *suiteRun) launch(root string, extra []string) (*process, error) {
	for try := 0; ; try++ {
		r.httpAddr, r.grpcAddr = freeAddr(r.t), freeAddr(r.t)
		var env, argv []string
		if r.mode == modeCompat {
			host, port, _ := net.SplitHostPort(r.httpAddr)
			ghost, gport, _ := net.SplitHostPort(r.grpcAddr)
			env = []string{
				"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
				"HOST=" + host, "PORT=" + port, "GRPC_HOST=" + ghost, "GRPC_PORT=" + gport, "USE_STATSD=false",
			}
			for k, v := range r.c.env {
				env = append(env, k+"="+v)
			}
			if r.redis != nil {
				env = append(env, r.redis.env()...)
			}
			argv = []string{"serve", "--envoy-compat"}
		} else {
			argv = append([]string{"serve", "--addr", r.httpAddr, "--grpc-addr", r.grpcAddr, "--envoy-config", r.dir}, r.c.flags...)
		}
		argv = append(append(argv, extra...), "--data-dir", filepath.Join(root, fmt.Sprintf("data%d", try)), "--config-poll", "100ms")
		p, err := launch(r.t, r.httpAddr, env, argv...)
		if err != nil && strings.Contains(p.log(), "address already in use") && try < 3 {
			r.t.Logf("a port was taken meanwhile: again on others")
			continue
		}
		return p, err
	}
}

// steps runs the case's steps, and returns what differed.
func (r *suiteRun) steps() []string {
	var errs []string
	for _, s := range r.c.steps {
		if s.do != nil {
			if err := s.do(r); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", s.what, err))
				if r.t.Failed() {
					return errs
				}
			}
			continue
		}
		n := max(s.n, 1)
		for i := range n {
			want := s.want(i)
			if r.mode == modeDefault && s.dflt != nil {
				want = s.dflt(i)
			}
			what := s.what
			if n > 1 {
				what = fmt.Sprintf("%s, #%d", s.what, i+1)
			}
			errs = append(errs, r.check(what, r.request(s.req), want)...)
		}
	}
	return errs
}

// request is a copy of req with the attempt's token in its values.
func (r *suiteRun) request(req *rlspb.RateLimitRequest) *rlspb.RateLimitRequest {
	req = proto.Clone(req).(*rlspb.RateLimitRequest)
	for _, d := range req.Descriptors {
		for _, e := range d.Entries {
			e.Value = strings.ReplaceAll(e.Value, "{u}", r.u)
		}
	}
	return req
}

// call sends one request.
func (r *suiteRun) call(req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return r.r.c.ShouldRateLimit(ctx, req)
}

// check sends req and compares the answer with want.
func (r *suiteRun) check(what string, req *rlspb.RateLimitRequest, want answer) []string {
	before := time.Now()
	resp, err := r.call(req)
	after := time.Now()
	return compare(what, resp, err, want, before, after)
}

// compare returns how an answer differs from the one wanted.
func compare(what string, resp *rlspb.RateLimitResponse, err error, want answer, before, after time.Time) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, what+": "+fmt.Sprintf(format, args...)) }
	if want.err != codes.OK {
		if status.Code(err) != want.err || !strings.Contains(status.Convert(err).Message(), want.errText) {
			fail("%v, %v; want the error %v %q", resp, err, want.err, want.errText)
		}
		return errs
	}
	if err != nil {
		fail("%v", err)
		return errs
	}
	if resp.OverallCode != want.code {
		fail("overall %v, want %v", resp.OverallCode, want.code)
	}
	if len(resp.Statuses) != len(want.statuses) {
		fail("%d statuses, want %d: %v", len(resp.Statuses), len(want.statuses), resp.Statuses)
		return errs
	}
	for i, w := range want.statuses {
		st := resp.Statuses[i]
		var limit uint32
		var u unit
		if l := st.GetCurrentLimit(); l != nil {
			limit, u = l.GetRequestsPerUnit(), l.GetUnit()
		}
		switch {
		case st.GetCode() != w.code || st.GetLimitRemaining() != w.left:
			fail("status %d: %v, %d left; want %v, %d left", i, st.GetCode(), st.GetLimitRemaining(), w.code, w.left)
		case w.none && st.GetCurrentLimit() != nil:
			fail("status %d: limit %v, want none", i, st.GetCurrentLimit())
		case !w.none && (limit != w.limit || u != w.unit):
			fail("status %d: limit %d a %v, want %d a %v", i, limit, u, w.limit, w.unit)
		}
		if msg := resetDiffers(st, w, before, after); msg != "" {
			fail("status %d: %s", i, msg)
		}
	}
	if want.headers != nil {
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		for k, v := range want.headers {
			if v == "*" && got[k] != "" {
				continue // present: its value checked elsewhere
			}
			if got[k] != v {
				fail("header %s: %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
		if len(got) != len(want.headers) {
			fail("headers %v, want %v", got, want.headers)
		}
	}
	for path, v := range want.meta {
		if got := metaAt(resp.DynamicMetadata, path); got != v {
			fail("dynamic metadata %s: %q, want %q (all: %v)", path, got, v, resp.DynamicMetadata)
		}
	}
	return errs
}

// windowOf is a fixed window's length in seconds, by the reference's
// units; 0 for the others.
func windowOf(u unit) int64 {
	return map[unit]int64{uSec: 1, uMin: 60, uHour: 3600, uDay: 86400, rlspb.RateLimitResponse_RateLimit_WEEK: 7 * 86400}[u]
}

// resetDiffers checks a status's duration until reset: the end of its
// fixed window as the server saw the time between before and after; none
// without a limit.
func resetDiffers(st *rlspb.RateLimitResponse_DescriptorStatus, w wantSt, before, after time.Time) string {
	got := st.GetDurationUntilReset().GetSeconds()
	if w.none {
		if got != 0 {
			return fmt.Sprintf("%ds until reset, want none: no limit", got)
		}
		return ""
	}
	win := windowOf(w.unit)
	if win == 0 {
		return ""
	}
	hi, lo := win-before.Unix()%win, win-after.Unix()%win
	if lo > hi { // the window turned meanwhile
		lo, hi = 1, win
	}
	if got < lo || got > hi {
		return fmt.Sprintf("%ds until reset, want %d to %d, the end of its window of %ds", got, lo, hi, win)
	}
	return ""
}

// metaAt renders the dynamic metadata's value at a dotted path: a string
// as it is, another value as JSON, "-" if absent.
func metaAt(s *structpb.Struct, path string) string {
	v := structpb.NewStructValue(s)
	if s == nil {
		return "-"
	}
	for _, k := range strings.Split(path, ".") {
		f, found := v.GetStructValue().GetFields()[k]
		if !found {
			return "-"
		}
		v = f
	}
	if sv, isString := v.GetKind().(*structpb.Value_StringValue); isString {
		return sv.StringValue
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out bytes.Buffer
	for _, c := range b { // protojson may add spaces at random: drop them
		if c != ' ' {
			out.WriteByte(c)
		}
	}
	return out.String()
}

// Actions.

// waitAnswer polls req until the answer is want (a reload taking effect).
func waitAnswer(req *rlspb.RateLimitRequest, want answer) func(r *suiteRun) error {
	return func(r *suiteRun) error {
		deadline := time.Now().Add(patience)
		for {
			errs := r.check("", r.request(req), want)
			if len(errs) == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("not within %v: %v", patience, errs)
			}
			time.Sleep(50 * time.Millisecond) // the poll's period
		}
	}
}

// putFile copies a file of testdata/envoysuite into the live
// configuration directory, by a rename, as configuration tools do.
func putFile(from, name string) func(r *suiteRun) error {
	return func(r *suiteRun) error {
		b, err := os.ReadFile(filepath.Join("testdata/envoysuite", from))
		if err != nil {
			return err
		}
		writeFileAtomic(r.t, filepath.Join(r.dir, name), b)
		return nil
	}
}

// removeFile removes a file of the live configuration directory.
func removeFile(name string) func(r *suiteRun) error {
	return func(r *suiteRun) error { return os.Remove(filepath.Join(r.dir, name)) }
}

// settle waits for a few polls of the configuration directory, for a
// change that must not take effect (a bad file): long enough to have
// been read more than once.
func settle(r *suiteRun) error {
	time.Sleep(500 * time.Millisecond)
	return nil
}

// nextWindow waits until the case's window turns: its counters are new.
func nextWindow(r *suiteRun) error {
	w := r.c.window
	time.Sleep(time.Until(time.Unix((time.Now().Unix()/w+1)*w, int64(5*time.Millisecond))))
	r.turns++
	return nil
}

// healthIs checks the gRPC health of a service, polling until it is
// want.
func healthIs(service string, want healthpb.HealthCheckResponse_ServingStatus) func(r *suiteRun) error {
	return func(r *suiteRun) error {
		deadline := time.Now().Add(patience)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			h, err := healthpb.NewHealthClient(r.r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			cancel()
			if err == nil && h.Status == want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("health of %q: %v, %v; want %v", service, h, err, want)
			}
			time.Sleep(50 * time.Millisecond) // the poll's period
		}
	}
}

// httpCall sends an HTTP request to the server's --addr and checks the
// status and that the body holds wantBody, polling until it does.
func httpCall(method, path, body string, wantCode int, wantBody string) func(r *suiteRun) error {
	return func(r *suiteRun) error {
		client := &http.Client{Timeout: patience}
		defer client.CloseIdleConnections() // no connection outlives the test
		deadline := time.Now().Add(patience)
		for {
			code, got, err := func() (int, string, error) {
				req, err := http.NewRequest(method, "http://"+r.httpAddr+path, strings.NewReader(strings.ReplaceAll(body, "{u}", r.u)))
				if err != nil {
					return 0, "", err
				}
				resp, err := client.Do(req)
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), err
			}()
			if err == nil && code == wantCode && strings.Contains(strings.ReplaceAll(got, " ", ""), wantBody) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s %s: %d %q, %v; want %d with %q", method, path, code, got, err, wantCode, wantBody)
			}
			time.Sleep(50 * time.Millisecond) // the poll's period
		}
	}
}

// tlsHandshake checks that a TLS handshake with the gRPC address, as a
// client trusting only CA a or b, succeeds or fails, polling until it
// does (a replaced certificate is read on change).
func tlsHandshake(trust string, wantOK bool) func(r *suiteRun) error {
	return func(r *suiteRun) error {
		pemBytes, err := os.ReadFile(filepath.Join(r.tlsDir, trust, "ca.pem"))
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		deadline := time.Now().Add(patience)
		for {
			d := &net.Dialer{Timeout: 5 * time.Second}
			conn, err := tls.DialWithDialer(d, "tcp", r.grpcAddr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
			if err == nil {
				conn.Close()
			}
			if (err == nil) == wantOK {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("trusting %s: %v; want success %v", trust, err, wantOK)
			}
			time.Sleep(50 * time.Millisecond) // the poll's period
		}
	}
}

// swapCertificate replaces the live certificate and key by b's, by
// renames, as the reference's test does.
func swapCertificate(r *suiteRun) error {
	for _, f := range []string{"cert.pem", "key.pem"} {
		if err := os.Rename(filepath.Join(r.tlsDir, "b", f), filepath.Join(r.tlsDir, f)); err != nil {
			return err
		}
	}
	return nil
}

// stopRedis stops the case's redis-server: the store fails.
func stopRedis(r *suiteRun) error {
	r.redis.stop()
	return nil
}

// redisServer is a redis-server of one test's own: standalone, with a
// password, over TLS, a Cluster of one node, or behind a Sentinel.
type redisServer struct {
	kind     string
	addr     string // the server's (the sentinel's for "sentinel")
	password string
	ca       string // the CA's PEM file, over TLS
	procs    []*redisProc
	once     sync.Once
}

// redisProc is a redis process, and its end.
type redisProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// url is the server's --redis-url.
func (s *redisServer) url() string {
	user := ""
	if s.password != "" {
		user = ":" + s.password + "@"
	}
	switch s.kind {
	case "tls":
		return "rediss://" + user + s.addr
	case "cluster":
		return "redis+cluster://" + user + s.addr
	case "sentinel":
		// go-redis: the user information is the sentinels', the
		// password query the server's.
		return "redis://" + s.addr + "?master_name=suite&password=" + s.password
	}
	return "redis://" + user + s.addr
}

// env is the reference's variables for the server.
func (s *redisServer) env() []string {
	env := []string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.addr}
	if s.password != "" {
		env = append(env, "REDIS_AUTH="+s.password)
	}
	switch s.kind {
	case "tls":
		env = append(env, "REDIS_TLS=true", "REDIS_TLS_CACERT="+s.ca)
	case "cluster":
		env = append(env, "REDIS_TYPE=cluster")
	case "sentinel":
		env = append(env, "REDIS_TYPE=sentinel", "REDIS_URL=suite,"+s.addr)
	}
	return env
}

func (s *redisServer) stop() {
	s.once.Do(func() {
		for _, p := range s.procs {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// startRedis starts a redis-server (Debian's) of a kind, on free ports,
// keeping nothing on disk: "plain"; "auth", with a password; "tls", with
// a password, over TLS only; "cluster", a Redis Cluster of one node that
// holds every slot, with a password; "sentinel", a server with a password
// and a Sentinel that watches it.
func startRedis(t *testing.T, kind string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	dir := t.TempDir()
	s := &redisServer{kind: kind}
	t.Cleanup(s.stop)
	if kind != "plain" {
		s.password = "suite-secret-" + strconv.Itoa(os.Getpid())
	}
	var cert, key string
	if kind == "tls" {
		s.ca = filepath.Join(dir, "ca.pem")
		cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		ca := testcert.NewCA(t)
		ca.WriteCA(t, s.ca)
		ca.Issue(t, 1, cert, key)
	}
	s.addr = s.spawn(t, bin, func(port string) []string {
		args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
		if s.password != "" {
			args = append(args, "--requirepass", s.password, "--masterauth", s.password)
		}
		switch kind {
		case "tls":
			args = append(args, "--port", "0", "--tls-port", port, "--tls-cert-file", cert, "--tls-key-file", key,
				"--tls-ca-cert-file", s.ca, "--tls-auth-clients", "no")
		case "cluster":
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
		}
		return args
	})
	_, port, _ := net.SplitHostPort(s.addr)
	// cli asks redis-cli, with the password if auth.
	cli := func(port string, auth bool, a ...string) string {
		base := []string{"-h", "127.0.0.1", "-p", port, "--no-auth-warning"}
		if auth {
			base = append(base, "-a", s.password)
		}
		out, _ := exec.Command("redis-cli", append(base, a...)...).CombinedOutput()
		return string(out)
	}
	switch kind {
	case "cluster":
		cli(port, true, "cluster", "addslotsrange", "0", "16383")
		waitFor(t, "the cluster", func() bool { return strings.Contains(cli(port, true, "cluster", "info"), "cluster_state:ok") })
	case "sentinel":
		conf := filepath.Join(dir, "sentinel.conf")
		s.addr = s.spawn(t, bin, func(sport string) []string {
			body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor suite 127.0.0.1 %s 1\nsentinel auth-pass suite %s\n", sport, dir, port, s.password)
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{conf, "--sentinel"}
		})
		_, sport, _ := net.SplitHostPort(s.addr)
		waitFor(t, "the sentinel", func() bool {
			return strings.Contains(cli(sport, false, "sentinel", "get-master-addr-by-name", "suite"), port)
		})
	}
	return s
}

// spawn starts a redis process on a free port, with the arguments args
// makes for it, and returns its address once it accepts connections:
// anew on another port if it exits first (the port was taken meanwhile).
func (s *redisServer) spawn(t *testing.T, bin string, args func(port string) []string) string {
	t.Helper()
	for try := 0; ; try++ {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, args(port)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &redisProc{cmd: cmd, exited: make(chan struct{})}
		s.procs = append(s.procs, p)
		ready := make(chan struct{})
		var log strings.Builder // written by the reader until exited is closed
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				// A server says it is ready; a Sentinel, that it monitors.
				if strings.Contains(sc.Text(), "Ready to accept connections") || strings.Contains(sc.Text(), "+monitor master") {
					close(ready)
					break
				}
			}
			io.Copy(io.Discard, out)
			cmd.Wait()
			close(p.exited)
		}()
		select {
		case <-ready:
			return addr
		case <-p.exited:
			if try < 3 && strings.Contains(log.String(), "in use") {
				continue
			}
			t.Fatalf("redis-server exited:\n%s", log.String())
		case <-time.After(patience):
			t.Fatalf("redis-server not ready within %v", patience)
		}
	}
}
