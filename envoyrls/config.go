package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
)

// Config is a loaded directory of envoyproxy/ratelimit YAML files: its
// domains, each a tree of descriptors. It is immutable once loaded, and
// safe for concurrent use.
type Config struct {
	domains  map[string]*node
	policies map[string]bool // the names of the rules' policies
}

// HasPolicy reports whether name is the policy of a rule's limit; a nil
// Config has none.
func (c *Config) HasPolicy(name string) bool { return c != nil && c.policies[name] }

// HasDomain reports whether domain is configured; a nil Config has none.
func (c *Config) HasDomain(domain string) bool { return c != nil && c.domains[domain] != nil }

// NumDomains returns how many domains are configured; a nil Config has
// none.
func (c *Config) NumDomains() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// Domains returns the domains' names, sorted; a nil Config has none.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// node is one level of a domain's descriptor tree: the descriptors below it,
// by key and value (value empty: any value), those whose value has a
// wildcard, in the order of the file, and the rule of the descriptor it is,
// if it has one.
type node struct {
	children  map[entryKey]*node
	wildcards []wildcard
	rule      *Rule
	// share is the wildcard pattern of a share_threshold descriptor: the
	// values it matches count as one.
	share string
}

type entryKey struct{ key, value string }

type wildcard struct {
	key   string
	parts []string // the value split on '*'
	node  *node
}

// Rule is a descriptor's rate limit: the one of envoyproxy/ratelimit, or
// several (Sluice's rate_limits).
type Rule struct {
	// FullKey names the rule as envoyproxy/ratelimit names it in its
	// metrics: the domain and the descriptors' key_value, dot-separated.
	FullKey   string
	Name      string   // rate_limit.name, for replaces
	Replaces  []string // the names this rule replaces
	Unlimited bool
	Shadow    bool
	// QuotaMode is the rule's quota_mode: over its limits, its descriptor
	// denies the request only if every quota-mode descriptor of the
	// request is over too (Options.QuotaMode makes every descriptor one).
	QuotaMode bool
	// Metadata is the descriptor's metadata, which the response's dynamic
	// metadata carries when the descriptor passes
	// (Options.DynamicMetadata); nil if none. Never changed once loaded.
	Metadata *structpb.Struct
	// Limits are the rule's limits, each a Sluice policy. A request
	// within every one of them is within the rule.
	Limits []Limit
}

// Limit is one limit of a rule.
type Limit struct {
	Policy sluice.Policy
	// Proto is the limit as a descriptor status reports it.
	Proto *rlspb.RateLimitResponse_RateLimit
	// Zero is a limit of zero requests: every request is over it, and the
	// store is not asked.
	Zero bool
}

// The YAML of envoyproxy/ratelimit, and Sluice's fields beside it.
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
	// Sluice: more limits on the same descriptor, all of which apply.
	RateLimits []yamlRateLimit `yaml:"rate_limits"`
}

type yamlRateLimit struct {
	RequestsPerUnit *uint32        `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	// Sluice's fields.
	Algorithm string        `yaml:"algorithm"`
	Window    time.Duration `yaml:"window"`
	Burst     int64         `yaml:"burst"`
	FailMode  string        `yaml:"fail_mode"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// units are envoyproxy/ratelimit's units and their lengths (a month is 30
// days and a year 365, as there).
var units = map[string]struct {
	d    time.Duration
	unit rlspb.RateLimitResponse_RateLimit_Unit
}{
	"second": {time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
	"minute": {time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
	"day":    {24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_WEEK},
	"month":  {30 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_MONTH},
	"year":   {365 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_YEAR},
}

// LoadDir loads every *.yaml and *.yml file of dir (not its dot files, nor
// its subdirectories), as envoyproxy/ratelimit loads its runtime
// directory. Each file holds one domain; a domain in two files is an error.
// Any error names its file and, where it can, its line.
func LoadDir(dir string) (*Config, error) {
	files, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	return Parse(files)
}

// File is one configuration file: its name, for errors, and its content.
type File struct {
	Name string
	Data []byte
}

// readDir reads the configuration files of dir, sorted by name.
func readDir(dir string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	var files []File
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			continue // a dangling link or a directory: not a file
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("envoy config: %w", err)
		}
		files = append(files, File{Name: path, Data: b})
	}
	return files, nil
}

// Loading says how files make a configuration. The zero Loading is
// envoyproxy/ratelimit's default.
type Loading struct {
	// MergeDomains merges the files of one domain into one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true does, in the order
	// of their names, instead of refusing a domain in two files. A
	// descriptor at the top of two of them (the same key and value) is
	// an error naming the second, so that no file takes another's
	// descriptor over.
	MergeDomains bool
	// StartWithoutConfig lets a Watcher start when its directory does not
	// load (missing, or a bad file), as envoyproxy/ratelimit's
	// FORCE_START_WITHOUT_INITIAL_CONFIG=true does: it holds no
	// configuration (nil) until the directory changes and loads.
	StartWithoutConfig bool
}

// Parse loads configuration files.
func Parse(files []File) (*Config, error) { return Loading{}.Parse(files) }

// Parse loads configuration files as l says.
func (l Loading) Parse(files []File) (*Config, error) {
	c := &Config{domains: map[string]*node{}, policies: map[string]bool{}}
	for _, f := range files {
		var root yamlRoot
		dec := yaml.NewDecoder(bytes.NewReader(f.Data))
		dec.KnownFields(true)
		if err := dec.Decode(&root); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("envoy config: %s: empty file", f.Name)
			}
			return nil, fmt.Errorf("envoy config: %s: %s", f.Name, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if root.Domain == "" {
			return nil, fmt.Errorf("envoy config: %s: domain: must not be empty", f.Name)
		}
		n, dup := c.domains[root.Domain]
		if dup && !l.MergeDomains {
			return nil, fmt.Errorf("envoy config: %s: domain %q is already defined by another file (--envoy-merge-domains merges them)", f.Name, root.Domain)
		}
		if len(root.Domain) > maxDomainLen {
			return nil, fmt.Errorf("envoy config: %s: domain %q is longer than %d bytes", f.Name, root.Domain, maxDomainLen)
		}
		if !dup {
			n = &node{}
		}
		if err := n.load(root.Domain, root.Domain, "descriptors", root.Descriptors); err != nil {
			if dup {
				return nil, fmt.Errorf("envoy config: %s: %w (merging domain %q)", f.Name, err, root.Domain)
			}
			return nil, fmt.Errorf("envoy config: %s: %w", f.Name, err)
		}
		c.domains[root.Domain] = n
		n.walk(func(r *Rule) {
			for _, l := range r.Limits {
				c.policies[l.Policy.Name] = true
			}
		})
	}
	return c, nil
}

// maxDomainLen keeps a domain, as a Sluice tenant ("envoy:" and the
// domain), within sluice.MaxTenantLen.
const maxDomainLen = tenancy.MaxEnvoyDomainLen

// load builds the level below n from ds, beside what it has (a domain's
// other files); fullKey names n, path locates ds in the file, for errors.
func (n *node) load(domain, fullKey, path string, ds []yamlDescriptor) error {
	if n.children == nil {
		n.children = map[entryKey]*node{}
	}
	for i, d := range ds {
		at := fmt.Sprintf("%s[%d]", path, i)
		if d.Key == "" {
			return fmt.Errorf("%s.key: must not be empty", at)
		}
		k := entryKey{d.Key, d.Value}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		childKey := fullKey + "." + final
		if _, dup := n.children[k]; dup {
			return fmt.Errorf("%s: duplicate descriptor %q", at, childKey)
		}
		child := &node{}
		wild := strings.Contains(d.Value, "*")
		if d.ShareThreshold {
			if !wild {
				return fmt.Errorf("%s.share_threshold: needs a wildcard value (with '*'), got %q", at, d.Value)
			}
			child.share = d.Value
		}
		rule, err := loadRule(domain, childKey, at, &d)
		if err != nil {
			return err
		}
		child.rule = rule
		if err := child.load(domain, childKey, at+".descriptors", d.Descriptors); err != nil {
			return err
		}
		n.children[k] = child
		if wild {
			n.wildcards = append(n.wildcards, wildcard{key: d.Key, parts: strings.Split(d.Value, "*"), node: child})
		}
	}
	return nil
}

// walk calls f with every rule below n.
func (n *node) walk(f func(*Rule)) {
	for _, c := range n.children {
		if c.rule != nil {
			f(c.rule)
		}
		c.walk(f)
	}
}

// loadRule returns d's rule, or nil if it has none.
func loadRule(domain, fullKey, at string, d *yamlDescriptor) (*Rule, error) {
	if d.RateLimit == nil && len(d.RateLimits) == 0 {
		if d.ShadowMode {
			return nil, fmt.Errorf("%s.shadow_mode: needs a rate_limit", at)
		}
		return nil, nil
	}
	r := &Rule{FullKey: fullKey, Shadow: d.ShadowMode, QuotaMode: d.QuotaMode}
	if len(d.Metadata) > 0 {
		m, err := structpb.NewStruct(jsonish(d.Metadata).(map[string]any))
		if err != nil {
			return nil, fmt.Errorf("%s.metadata: %w", at, err)
		}
		r.Metadata = m
	}
	blocks := d.RateLimits
	if d.RateLimit != nil {
		blocks = append([]yamlRateLimit{*d.RateLimit}, d.RateLimits...)
		rl := d.RateLimit
		r.Name = rl.Name
		for j, rep := range rl.Replaces {
			switch {
			case rep.Name == "":
				return nil, fmt.Errorf("%s.rate_limit.replaces[%d].name: must not be empty", at, j)
			case rep.Name == rl.Name:
				return nil, fmt.Errorf("%s.rate_limit.replaces[%d].name: a rule cannot replace itself (%q)", at, j, rep.Name)
			}
			r.Replaces = append(r.Replaces, rep.Name)
		}
		if rl.Unlimited {
			if rl.Unit != "" || rl.RequestsPerUnit != nil || rl.Window != 0 || rl.Algorithm != "" || len(d.RateLimits) > 0 {
				return nil, fmt.Errorf("%s.rate_limit.unlimited: an unlimited descriptor takes no unit, requests_per_unit, window, algorithm or rate_limits", at)
			}
			r.Unlimited = true
			return r, nil
		}
	}
	for j := range blocks {
		field := fmt.Sprintf("%s.rate_limits[%d]", at, j-1)
		if d.RateLimit != nil && j == 0 {
			field = at + ".rate_limit"
		} else if d.RateLimit == nil {
			field = fmt.Sprintf("%s.rate_limits[%d]", at, j)
		}
		b := &blocks[j]
		if j > 0 || d.RateLimit == nil {
			if b.Unlimited || b.Name != "" || len(b.Replaces) > 0 {
				return nil, fmt.Errorf("%s: unlimited, name and replaces belong in rate_limit, not rate_limits", field)
			}
		}
		l, err := loadLimit(domain, fullKey, j, b)
		if err != nil {
			return nil, fmt.Errorf("%s.%w", field, err)
		}
		l.Policy.Shadow = r.Shadow
		r.Limits = append(r.Limits, l)
	}
	return r, nil
}

// jsonish is v, a YAML value, as structpb takes it: mappings of any
// keys with their keys as text (as the reference takes them), timestamps
// as text.
func jsonish(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = jsonish(e)
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonish(e)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = jsonish(e)
		}
		return l
	case time.Time:
		return v.Format(time.RFC3339Nano)
	default:
		return v
	}
}

// loadLimit makes the i-th limit of the rule fullKey a Sluice policy.
func loadLimit(domain, fullKey string, i int, b *yamlRateLimit) (Limit, error) {
	if b.RequestsPerUnit == nil {
		return Limit{}, errors.New("requests_per_unit: is required")
	}
	rpu := *b.RequestsPerUnit
	var window time.Duration
	unit := rlspb.RateLimitResponse_RateLimit_UNKNOWN
	switch {
	case b.Unit != "" && b.Window != 0:
		return Limit{}, errors.New("window: give a unit or a window, not both")
	case b.Window != 0:
		window = b.Window
		for _, u := range units {
			if u.d == window {
				unit = u.unit
			}
		}
	default:
		u, ok := units[strings.ToLower(b.Unit)]
		if !ok {
			return Limit{}, fmt.Errorf("unit: must be second, minute, hour, day, week, month or year, got %q", b.Unit)
		}
		window, unit = u.d, u.unit
	}
	alg := sluice.FixedWindow
	if b.Algorithm != "" {
		var err error
		if alg, err = sluice.ParseAlgorithm(b.Algorithm); err != nil || alg == sluice.Concurrency || alg == sluice.PenaltyBox {
			return Limit{}, fmt.Errorf("algorithm: must be fixed_window, sliding_window, sliding_log, token_bucket or quota, got %q", b.Algorithm)
		}
	}
	l := Limit{Proto: &rlspb.RateLimitResponse_RateLimit{Name: b.Name, RequestsPerUnit: rpu, Unit: unit}}
	l.Policy = sluice.Policy{Name: policyName(domain, fullKey, i), Algorithm: alg, Limit: int64(rpu), Window: window, Burst: b.Burst}
	switch b.FailMode {
	case "", "open":
	case "closed":
		l.Policy.FailMode = sluice.FailClosed
	default:
		return Limit{}, fmt.Errorf("fail_mode: must be open or closed, got %q", b.FailMode)
	}
	if rpu == 0 {
		// A limit of nothing (envoyproxy/ratelimit's way to block): every
		// request is over it. Sluice's policies start at 1.
		if b.Burst != 0 || b.Algorithm != "" {
			return Limit{}, errors.New("requests_per_unit: a limit of 0 takes no algorithm or burst")
		}
		l.Zero, l.Policy.Limit = true, 1
	}
	if b.Burst != 0 && alg != sluice.TokenBucket {
		return Limit{}, fmt.Errorf("burst: applies to token_bucket only, the algorithm is %s", alg)
	}
	if err := l.Policy.Validate(); err != nil {
		var se *sluice.Error
		if errors.As(err, &se) && se.Field != "" {
			return Limit{}, fmt.Errorf("%s: %s", yamlField(se.Field), se.Message)
		}
		return Limit{}, err
	}
	return l, nil
}

// yamlField is the YAML name of a policy's field.
func yamlField(f string) string {
	switch f {
	case "limit":
		return "requests_per_unit"
	default:
		return f
	}
}

// policyName is the name of the i-th limit of rule fullKey (its domain
// first): fullKey made a
// valid policy name (its metrics label and part of its counters' keys), the
// same across reloads so that counters survive them. One too long, or with
// characters a name cannot hold, is a readable prefix and a hash.
func policyName(domain, fullKey string, i int) string {
	name := fullKey
	if i > 0 {
		name += fmt.Sprintf("#%d", i)
	}
	if sluice.ValidPolicyName(name) {
		return name
	}
	clean := []byte(name)
	for j, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/-", c) >= 0) {
			clean[j] = '_'
		}
	}
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%.100s-%s", clean, hex.EncodeToString(sum[:8]))
}

// match finds the rule of a request's descriptor, as envoyproxy/ratelimit
// does: level by level, the entry's key and value, else the first wildcard
// its value matches, else its key alone; a rule applies only at the
// descriptor's last entry. shared holds, for each entry matched through a
// share_threshold wildcard, its pattern, which stands for its value in the
// counter's key; it is nil if none was.
func (c *Config) match(domain string, entries []entry) (rule *Rule, shared []string) {
	n := c.domains[domain]
	if n == nil {
		return nil, nil
	}
	for i, e := range entries {
		next := n.children[entryKey{e.key, e.value}]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == e.key && wildcardMatch(w.parts, e.value) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = n.children[entryKey{e.key, ""}]
		}
		if next == nil {
			return nil, nil
		}
		if next.share != "" {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = next.share
		}
		if i == len(entries)-1 {
			return next.rule, shared
		}
		if len(next.children) == 0 {
			return nil, nil // the request is deeper than the configuration
		}
		n = next
	}
	return nil, nil
}

// wildcardMatch reports whether value matches the pattern split on '*' into
// parts: each '*' matches any run of characters, empty included.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
