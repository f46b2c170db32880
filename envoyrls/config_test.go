package envoyrls

import (
	"strings"
	"testing"
)

func parse(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	return Parse([]File{{Name: "test.yaml", Data: []byte(yaml)}})
}

// TestParseErrors: a bad file is refused with an error naming the file and
// what is wrong in it.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"", "empty file"},
		{"descriptors: []", "domain: must not be empty"},
		{"domain: d\nfoo: 1", "field foo not found"},
		{"domain: d\ndescriptors:\n  - value: v", "descriptors[0].key: must not be empty"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", `descriptors[0].rate_limit.unit: must be second`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}", "requests_per_unit: is required"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}", "unlimited descriptor takes no unit"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k", `duplicate descriptor "d.k"`},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true", "share_threshold: needs a wildcard"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, replaces: [{name: a}], unit: second, requests_per_unit: 1}", "cannot replace itself"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {replaces: [{}], unit: second, requests_per_unit: 1}", "replaces[0].name: must not be empty"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: concurrency, unit: second, requests_per_unit: 1}", "rate_limit.algorithm: must be"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {burst: 5, unit: second, requests_per_unit: 1}", "burst: applies to token_bucket only"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 10s, unit: second, requests_per_unit: 1}", "a unit or a window, not both"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{name: x, unit: second, requests_per_unit: 1}]", "rate_limits[0]: unlimited, name and replaces belong in rate_limit"},
		{"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true", "shadow_mode: needs a rate_limit"},
		{"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 2000000000}", "descriptors[0].descriptors[0].rate_limit.requests_per_unit: must be between"},
	} {
		_, err := parse(t, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test.yaml") {
			t.Errorf("%q: %v, want an error naming test.yaml and %q", tc.yaml, err, tc.want)
		}
	}
	// One domain in two files.
	f := File{Name: "a.yaml", Data: []byte("domain: d\n")}
	if _, err := Parse([]File{f, {Name: "b.yaml", Data: f.Data}}); err == nil || !strings.Contains(err.Error(), `b.yaml: domain "d" is already defined`) {
		t.Errorf("a domain twice: %v", err)
	}
}

// TestMatch: envoyproxy/ratelimit's order of matching: key and value, then
// a wildcard, then the key alone; a rule only at the request's depth.
func TestMatch(t *testing.T) {
	c, err := parse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: x
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: y*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    value: "*z"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: b
    descriptors:
      - key: c
        value: "1"
        rate_limit: {unit: second, requests_per_unit: 5}
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []entry
		want    int64 // 0: no rule
		key     string
	}{
		{[]entry{{"a", "q"}}, 1, "a=q"},
		{[]entry{{"a", "x"}}, 2, "a=x"},
		{[]entry{{"a", "yes"}}, 3, "a=yes"},
		{[]entry{{"a", "y"}}, 3, "a=y"},
		{[]entry{{"a", "quiz"}}, 4, "a=%2Az"}, // shared: the pattern is the key
		{[]entry{{"a", "x"}, {"c", "1"}}, 0, ""},
		{[]entry{{"b", "any"}, {"c", "1"}}, 5, "b=any&c=1"},
		{[]entry{{"b", "any"}, {"c", "2"}}, 0, ""},
		{[]entry{{"b", "any"}}, 0, ""},
		{[]entry{{"e", "1"}}, 0, ""},
	} {
		r, shared := c.match("d", tc.entries)
		var got int64
		if r != nil {
			got = r.Limits[0].Policy.Limit
		}
		if got != tc.want {
			t.Errorf("%v: limit %d, want %d", tc.entries, got, tc.want)
			continue
		}
		if r != nil {
			if k := counterKey(tc.entries, shared); k != tc.key {
				t.Errorf("%v: counter key %q, want %q", tc.entries, k, tc.key)
			}
		}
	}
	if r, _ := c.match("other", []entry{{"a", "x"}}); r != nil {
		t.Errorf("another domain matched %v", r)
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"value*", "value", true}, {"value*", "valueX", true}, {"value*", "valu", false},
		{"/api/*/action", "/api/1/action", true}, {"/api/*/action", "/api//action", true}, {"/api/*/action", "/api/1/other", false},
		{"/api/*/action", "/api/action", false},
		{"a*b*c", "abc", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "acb", false}, {"a*b*c", "ac", false},
		{"*", "", true}, {"**", "x", true}, {"x", "x", true}, {"x", "y", false},
	} {
		if got := wildcardMatch(strings.Split(tc.pattern, "*"), tc.value); got != tc.want {
			t.Errorf("%q ~ %q: %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}
}

// TestPolicyNames: a rule's policy name is valid, and the same for the same
// rule, whatever characters its values hold.
func TestPolicyNames(t *testing.T) {
	c, err := parse(t, `
domain: d
descriptors:
  - key: path
    value: "/api/*/action with spaces"
    rate_limit: {unit: second, requests_per_unit: 1}
    rate_limits: [{unit: hour, requests_per_unit: 100}]
  - key: `+strings.Repeat("k", 200)+`
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	c.domains["d"].walk(func(r *Rule) {
		for _, l := range r.Limits {
			if err := l.Policy.Validate(); err != nil {
				t.Errorf("%s: %v", l.Policy.Name, err)
			}
			if names[l.Policy.Name] {
				t.Errorf("two limits named %s", l.Policy.Name)
			}
			names[l.Policy.Name] = true
			if !c.HasPolicy(l.Policy.Name) {
				t.Errorf("HasPolicy(%s) is false", l.Policy.Name)
			}
		}
	})
	if len(names) != 3 {
		t.Errorf("names %v, want 3", names)
	}
}
