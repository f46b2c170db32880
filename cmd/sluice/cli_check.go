package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

const checkUsage = `usage: sluice check [flags] POLICY...
       sluice check [flags] --endpoint NAME

Asks a running server for one decision of its configured policies (or an
endpoint's), for a tenant and a key, and prints it:

  allowed policy=chat limit=20 remaining=19 reset=60s
  denied policy=chat limit=20 remaining=0 reset=42s retry-after=42s

or, with --json, the server's answer (docs/api.md, POST /v1/check).
--cost 0 reads the key's state without consuming.

Exit status: 0 allowed, 1 denied, 2 an error (bad flags, the server
unreachable or unable to decide, or any answer but a decision).

Flags:
`

// checkCmd runs `sluice check`.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var f apiFlags
	f.register(fs)
	tenant := fs.String("tenant", os.Getenv("SLUICE_TENANT"), "the `tenant` (or $SLUICE_TENANT); with a tenant's API key, its own by default")
	endpoint := fs.String("endpoint", "", "an endpoint of the server's configuration, instead of POLICY names")
	parts := keyParts{}
	fs.Var(parts, "key", "a key part `name=value` the policies are keyed by (user=u-42), repeated for each part")
	cost := fs.Int64("cost", 1, "the request's `hits`; 0 reads the state without consuming")
	if helpAsked(args) {
		return printHelp(fs, checkUsage, stdout)
	}
	policies, err := parseCLI(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	switch {
	case *endpoint == "" && len(policies) == 0:
		return errors.New("check: name POLICY... or --endpoint NAME (sluice check -h)")
	case *endpoint != "" && len(policies) > 0:
		return errors.New("check: name POLICY... or --endpoint NAME, not both")
	case *cost < 0:
		return fmt.Errorf("check: --cost must be 0 or more, got %d", *cost)
	}
	a, err := f.newAPI(stderr)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	// The client decides when no decision comes; closed, so that the
	// CLI tells a made-up decision (failed closed) from the server's.
	t := &tap{rt: http.DefaultTransport}
	c := client.New(a.base, client.Options{APIKey: a.key, FailMode: sluice.FailClosed,
		HTTPClient: &http.Client{Transport: t}})
	res, err := c.CheckNamed(ctx, client.Named{Tenant: *tenant, Endpoint: *endpoint, Policies: policies,
		Key: parts, Hits: *cost})
	switch {
	case err == nil && decided(res.Result):
	case t.err != nil:
		return fmt.Errorf("check: %w", a.unreachable(t.err))
	case t.status != 0 && t.status != http.StatusOK && t.status != http.StatusTooManyRequests:
		return fmt.Errorf("check: %w", a.refused(t.status, t.body))
	case err != nil:
		return fmt.Errorf("check: %w", err) // refused before sending: a part not UTF-8
	default:
		return fmt.Errorf("check: the server at %s gave no decision", a.base)
	}
	if f.json {
		stdout.Write(t.body)
		if !bytes.HasSuffix(t.body, []byte("\n")) {
			fmt.Fprintln(stdout)
		}
	} else {
		fmt.Fprintln(stdout, decisionLine(res.Result, time.Now()))
	}
	if !res.Allowed {
		return errDenied
	}
	return nil
}

// decided reports whether res is the server's decision: the client makes
// one up, failed closed, when none comes; the server answers its own
// failed closed with 503, never a decision.
func decided(res sluice.Result) bool {
	for _, d := range res.Decisions {
		if d.FailedClosed {
			return false
		}
	}
	return true
}

// decisionLine is res as a person reads it, now.
func decisionLine(res sluice.Result, now time.Time) string {
	d := res.Decision
	var b strings.Builder
	if res.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("denied")
	}
	fmt.Fprintf(&b, " policy=%s limit=%d remaining=%d reset=%v", d.Policy, d.Limit, d.Remaining,
		max(0, d.ResetAt.Sub(now)).Round(time.Second))
	if !res.Allowed {
		fmt.Fprintf(&b, " retry-after=%v", roundWait(d.RetryAfter))
	}
	var denying, notes []string
	for _, o := range res.Decisions {
		switch {
		case !o.Allowed:
			denying = append(denying, o.Policy)
		case o.Shadowed:
			notes = append(notes, o.Policy+" would deny (shadow)")
		case o.FailedOpen:
			notes = append(notes, o.Policy+" failed open (the store could not decide)")
		}
	}
	if len(denying) > 1 {
		fmt.Fprintf(&b, " denied-by=%s", strings.Join(denying, ","))
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(notes, "; "))
	}
	return b.String()
}

// tap is a RoundTripper that keeps its one call's outcome: the error that
// left no answer, or the answer's status and body, which it passes on.
type tap struct {
	rt     http.RoundTripper
	err    error
	status int
	body   []byte
}

func (t *tap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		t.err = err
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.err = err
		return nil, err
	}
	t.status, t.body = resp.StatusCode, b
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// roundWait rounds d for a person: to the millisecond under ten seconds,
// else to the second (up: never earlier than the server said).
func roundWait(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return (d + time.Second - 1).Truncate(time.Second)
}
