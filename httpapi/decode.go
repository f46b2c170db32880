package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// MaxBodyBytes caps a request body.
const MaxBodyBytes = 64 << 10

// checkRequest is the JSON body of POST /v1/check. Checks and policies are
// kept raw and decoded one by one, so that an error names its exact path.
type checkRequest struct {
	Tenant string            `json:"tenant"`
	Hits   *int64            `json:"hits"` // absent means 1
	Checks []json.RawMessage `json:"checks"`
	// Named policies: an endpoint of the configuration, or policy names,
	// with the key parts their counters are keyed by.
	Endpoint string            `json:"endpoint"`
	Policies []string          `json:"policies"`
	Key      map[string]string `json:"key"`
}

type checkJSON struct {
	Key    string          `json:"key"`
	Policy json.RawMessage `json:"policy"`
}

// policyJSON is a policy on the wire. Algorithm and durations are decoded by
// hand for errors that name the field.
type policyJSON struct {
	Name      string          `json:"name"`
	Algorithm string          `json:"algorithm"`
	Limit     int64           `json:"limit"`
	Window    json.RawMessage `json:"window"`
	Burst     int64           `json:"burst"`
	LeaseTTL  json.RawMessage `json:"leaseTTL"`
	Buckets   int             `json:"buckets"`
	Calendar  string          `json:"calendar"`
	Shadow    bool            `json:"shadow"`
	FailMode  string          `json:"failMode"`
	Penalty   *penaltyJSON    `json:"penalty"`
	Leased    bool            `json:"leased"`
}

// penaltyJSON is a policy's penalty: durations as in windows.
type penaltyJSON struct {
	After int          `json:"after"`
	Base  jsonDuration `json:"base"`
	Max   jsonDuration `json:"max"`
}

func (p *penaltyJSON) penalty() sluice.Penalty {
	if p == nil {
		return sluice.Penalty{}
	}
	return sluice.Penalty{After: p.After, Base: time.Duration(p.Base), Max: time.Duration(p.Max)}
}

// readBody reads at most MaxBodyBytes of r's body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, sluice.Invalid("body", "exceeds %d bytes", MaxBodyBytes)
	}
	if err != nil {
		return nil, sluice.Invalid("body", "could not be read: %v", err)
	}
	return b, nil
}

// decodeChecks turns the inline checks of a POST /v1/check body into a
// request's checks.
func decodeChecks(in *checkRequest, req *sluice.Request) error {
	req.Checks = make([]sluice.Check, len(in.Checks))
	for i, raw := range in.Checks {
		prefix := fmt.Sprintf("checks[%d]", i)
		var c checkJSON
		if err := decodeStrict(raw, &c, prefix); err != nil {
			return err
		}
		if c.Policy == nil || string(c.Policy) == "null" {
			return sluice.Invalid(prefix+".policy", "is missing")
		}
		p, err := decodePolicy(c.Policy, prefix+".policy")
		if err != nil {
			return err
		}
		req.Checks[i] = sluice.Check{Policy: p, Key: c.Key}
	}
	return nil
}

func decodePolicy(raw json.RawMessage, prefix string) (sluice.Policy, error) {
	var pj policyJSON
	if err := decodeStrict(raw, &pj, prefix); err != nil {
		return sluice.Policy{}, err
	}
	p := sluice.Policy{Name: pj.Name, Limit: pj.Limit, Burst: pj.Burst, Buckets: pj.Buckets}
	var err error
	if pj.Algorithm != "" { // missing is reported by Policy.Validate
		if p.Algorithm, err = sluice.ParseAlgorithm(pj.Algorithm); err != nil {
			return p, sluice.Invalid(prefix+".algorithm", "%v", err)
		}
	}
	if err := p.Calendar.UnmarshalText([]byte(pj.Calendar)); err != nil {
		return p, sluice.Invalid(prefix+".calendar", "%v", err)
	}
	if err := p.FailMode.UnmarshalText([]byte(pj.FailMode)); err != nil {
		return p, sluice.Invalid(prefix+".failMode", "%v", err)
	}
	p.Shadow, p.Leased = pj.Shadow, pj.Leased
	p.Penalty = pj.Penalty.penalty()
	if p.Window, err = parseDuration(pj.Window); err != nil {
		return p, sluice.Invalid(prefix+".window", "%v", err)
	}
	if p.LeaseTTL, err = parseDuration(pj.LeaseTTL); err != nil {
		return p, sluice.Invalid(prefix+".leaseTTL", "%v", err)
	}
	return p, nil
}

// parseDuration accepts a Go duration string ("1m", "1h30m", "500ms") or a
// number of seconds. Absent is zero.
func parseDuration(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("is not a duration like \"60s\" or \"1h\": %q", s)
		}
		return d, nil
	}
	secs, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, fmt.Errorf("must be a duration string like \"60s\" or a number of seconds, got %s", raw)
	}
	if secs > float64(sluice.MaxWindow/time.Second)*2 || secs < -float64(sluice.MaxWindow/time.Second)*2 {
		return 0, fmt.Errorf("%v seconds is out of range", secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data, and names the offending field under prefix.
func decodeStrict(data []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			return sluice.Invalid(join(prefix, ""), "has data after the JSON value")
		}
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return sluice.Invalid(join(prefix, ""), "is empty: want a JSON object")
	case errors.As(err, &syntax):
		return sluice.Invalid(join(prefix, ""), "is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return sluice.Invalid(join(prefix, ""), "must be a JSON %s, got %s", want(v), typ.Value)
		}
		return sluice.Invalid(join(prefix, typ.Field), "must be %s, got %s", typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return sluice.Invalid(join(prefix, name), "is not a known field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return sluice.Invalid(join(prefix, ""), "is truncated JSON")
	}
	return sluice.Invalid(join(prefix, ""), "is not valid: %v", err)
}

func want(v any) string {
	switch v.(type) {
	case *checkRequest, *checkJSON, *policyJSON, *leaseRequest, *tenantJSON, *keyRequest:
		return "object"
	}
	return "value"
}

// join builds a field path; the empty path is the body itself.
func join(prefix, field string) string {
	switch {
	case prefix == "" && field == "":
		return "body"
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// The fast path of POST /v1/check: one decoder into typed structs. Most
// bodies are valid; only when this fails does the slow path decode piece by
// piece to name the field at fault.

type fastRequest struct {
	Tenant   string            `json:"tenant"`
	Hits     *int64            `json:"hits"`
	Checks   []fastCheck       `json:"checks"`
	Endpoint string            `json:"endpoint"`
	Policies []string          `json:"policies"`
	Key      map[string]string `json:"key"`
}

type fastCheck struct {
	Key    string      `json:"key"`
	Policy *fastPolicy `json:"policy"`
}

type fastPolicy struct {
	Name      string       `json:"name"`
	Algorithm string       `json:"algorithm"`
	Limit     int64        `json:"limit"`
	Window    jsonDuration `json:"window"`
	Burst     int64        `json:"burst"`
	LeaseTTL  jsonDuration `json:"leaseTTL"`
	Buckets   int          `json:"buckets"`
	Calendar  string       `json:"calendar"`
	Shadow    bool         `json:"shadow"`
	FailMode  string       `json:"failMode"`
	Penalty   *penaltyJSON `json:"penalty"`
	Leased    bool         `json:"leased"`
}

type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	v, err := parseDuration(b)
	*d = jsonDuration(v)
	return err
}

// decodeCheckBody decodes a POST /v1/check body: the checkRequest (with
// the named-policy fields) and, for inline policies, the request's checks.
func decodeCheckBody(body []byte) (checkRequest, []sluice.Check, error) {
	var f fastRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || dec.More() || !allPolicies(f.Checks) {
		// Decode again, piece by piece, for an error naming the field.
		var in checkRequest
		if err := decodeStrict(body, &in, ""); err != nil {
			return in, nil, err
		}
		var req sluice.Request
		if err := decodeChecks(&in, &req); err != nil {
			return in, nil, err
		}
		return in, nil, sluice.Invalid("body", "is not valid")
	}
	in := checkRequest{Tenant: f.Tenant, Hits: f.Hits, Endpoint: f.Endpoint, Policies: f.Policies, Key: f.Key}
	if f.Checks == nil {
		return in, nil, nil
	}
	in.Checks = make([]json.RawMessage, len(f.Checks)) // only their count is read
	checks := make([]sluice.Check, len(f.Checks))
	for i, c := range f.Checks {
		fp := c.Policy
		p := sluice.Policy{Name: fp.Name, Limit: fp.Limit, Window: time.Duration(fp.Window), Burst: fp.Burst,
			LeaseTTL: time.Duration(fp.LeaseTTL), Buckets: fp.Buckets, Shadow: fp.Shadow, Penalty: fp.Penalty.penalty(), Leased: fp.Leased}
		prefix := fmt.Sprintf("checks[%d].policy", i)
		var err error
		if fp.Algorithm != "" {
			if p.Algorithm, err = sluice.ParseAlgorithm(fp.Algorithm); err != nil {
				return in, nil, sluice.Invalid(prefix+".algorithm", "%v", err)
			}
		}
		if err := p.Calendar.UnmarshalText([]byte(fp.Calendar)); err != nil {
			return in, nil, sluice.Invalid(prefix+".calendar", "%v", err)
		}
		if err := p.FailMode.UnmarshalText([]byte(fp.FailMode)); err != nil {
			return in, nil, sluice.Invalid(prefix+".failMode", "%v", err)
		}
		checks[i] = sluice.Check{Policy: p, Key: c.Key}
	}
	return in, checks, nil
}

func allPolicies(cs []fastCheck) bool {
	for _, c := range cs {
		if c.Policy == nil {
			return false
		}
	}
	return true
}
