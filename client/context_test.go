package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// TestContextEnds: a caller's context that is cancelled, or whose
// deadline passed, before or while a call is in flight ends every call
// with ctx.Err(), as x/time/rate's Wait does, never with a decision of
// the fail modes (which answer only for a server that gives none).
func TestContextEnds(t *testing.T) {
	arrived := make(chan struct{}, 1)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the caller go
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // held until the caller gives up
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	c := client.New(srv.URL, client.Options{FailMode: sluice.FailOpen})
	inline := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute, FailMode: sluice.FailOpen}
	lease := client.LeaseRequest{Tenant: "acme", Policy: "reports-running"}
	calls := map[string]func(context.Context) error{
		"Check": func(ctx context.Context) error {
			res, err := c.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: inline, Key: "u"}}})
			return decided(res.Allowed, err)
		},
		"CheckNamed": func(ctx context.Context) error {
			res, err := c.CheckNamed(ctx, client.Named{Tenant: "acme", Endpoint: "chat", Key: map[string]string{"user": "u"}, Hits: 1})
			return decided(res.Allowed, err)
		},
		"CheckEndpoint": func(ctx context.Context) error {
			res, _, err := c.CheckEndpoint(ctx, "acme", "chat", map[string]string{"user": "u"}, 1)
			return decided(res.Allowed, err)
		},
		"AcquireLease": func(ctx context.Context) error {
			res, err := c.AcquireLease(ctx, lease)
			return decided(res.Allowed, err)
		},
		"RenewLease": func(ctx context.Context) error {
			_, err := c.RenewLease(ctx, lease, "tok")
			return err
		},
		"ReleaseLease": func(ctx context.Context) error {
			_, err := c.ReleaseLease(ctx, lease, "tok")
			return err
		},
		"Acquire": func(ctx context.Context) error {
			_, err := c.Acquire(ctx, "openai", "acme", "u", 1, time.Second)
			return err
		},
		"Proxy": func(ctx context.Context) error {
			r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "v1/models"}, Header: http.Header{}}
			resp, err := c.Proxy(ctx, "openai", client.ProxyCall{Tenant: "acme", Key: "u"}, r)
			if resp != nil {
				resp.Body.Close()
			}
			return err
		},
	}
	// ended is err if it is ctx's error alone, not also unavailable (what
	// a caller would retry).
	ended := func(err error) error {
		if sluice.KindOf(err) == sluice.KindUnavailable {
			return errors.New("unavailable: " + err.Error())
		}
		return err
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			call := func(ctx context.Context) error { return ended(call(ctx)) }
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := call(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled before: %v, want context.Canceled", err)
			}
			ctx, cancel = context.WithDeadline(context.Background(), time.Unix(1, 0))
			defer cancel()
			if err := call(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("deadline passed: %v, want context.DeadlineExceeded", err)
			}
			ctx, cancel = context.WithCancel(context.Background())
			go func() {
				<-arrived
				cancel()
			}()
			if err := call(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled in flight: %v, want context.Canceled", err)
			}
		})
	}
}

// decided is err, or an error if a decision came without one.
func decided(allowed bool, err error) error {
	if err == nil {
		return errors.New("a decision (allowed " + map[bool]string{true: "true", false: "false"}[allowed] + "), no error")
	}
	return err
}
