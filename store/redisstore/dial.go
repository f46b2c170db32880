package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DialOptions are what a URL cannot say.
type DialOptions struct {
	// RootCAs, if set, are the CAs a rediss:// server's certificate is
	// checked against, instead of the system's (--redis-ca). A URL that
	// is not TLS with RootCAs set is an error: the CA would check nothing.
	RootCAs *x509.CertPool
}

// Dial returns a client of the Redis a URL names, for a server's
// --redis-url, in go-redis's URL forms:
//
//   - redis://[user:password@]host:port[/db][?options], rediss:// for TLS:
//     one server (redis.ParseURL);
//   - the same with master_name=NAME: Sentinel, the host and each addr=
//     a sentinel (redis.ParseFailoverURL);
//   - the same with addr=host:port, once or more, or the scheme
//     redis+cluster:// (rediss+cluster://): Redis Cluster, the host and
//     each addr= a seed node (redis.ParseClusterURL).
//
// The options are go-redis's (dial_timeout, read_timeout, pool_size, …).
// unix:///path/to/redis.sock reaches a socket (go-redis's form). A URL
// that names no host (or socket) is refused (go-redis would reach
// localhost:6379), and no error repeats the URL, which may hold a
// password: Redact gives what may be logged. The client heeds its
// contexts' deadlines (ContextTimeoutEnabled), so that Options.Timeout
// bounds a call's reads and writes, not only read_timeout. The caller
// closes the client.
func Dial(rawURL string) (redis.UniversalClient, error) {
	return DialWith(rawURL, DialOptions{})
}

// DialWith is Dial with options.
func DialWith(rawURL string, o DialOptions) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("redisstore: redis URL %s: %v", Redact(rawURL), err)
	}
	if u.Scheme != "unix" && u.Hostname() == "" || u.Scheme == "unix" && u.Path == "" {
		return nil, fmt.Errorf("redisstore: redis URL %s names no host: want redis://[user:password@]host:port[/db]", Redact(rawURL))
	}
	q := u.Query()
	cluster := strings.HasSuffix(u.Scheme, "+cluster")
	if cluster {
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		rawURL = u.String()
	}
	if o.RootCAs != nil && u.Scheme != "rediss" {
		return nil, fmt.Errorf("redisstore: a CA is given for %s, which is not TLS: want rediss://", Redact(rawURL))
	}
	fail := func(kind string, err error) error {
		// go-redis's errors name options and values, not the URL; the
		// password is never among them.
		return fmt.Errorf("redisstore: %s URL %s: %w", kind, Redact(rawURL), err)
	}
	withCA := func(c *tls.Config) {
		if c != nil && o.RootCAs != nil {
			c.RootCAs = o.RootCAs
		}
	}
	switch {
	case q.Has("master_name"):
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fail("sentinel", err)
		}
		opts.ContextTimeoutEnabled = true
		withCA(opts.TLSConfig)
		return redis.NewFailoverClient(opts), nil
	case cluster || q.Has("addr"):
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fail("cluster", err)
		}
		opts.ContextTimeoutEnabled = true
		withCA(opts.TLSConfig)
		return redis.NewClusterClient(opts), nil
	default:
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fail("redis", err)
		}
		opts.ContextTimeoutEnabled = true
		withCA(opts.TLSConfig)
		return redis.NewClient(opts), nil
	}
}

// Redact returns a URL with its password, if any, replaced by "xxxxx",
// for logs and errors; a URL that does not parse is reduced to its scheme.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		scheme, _, ok := strings.Cut(rawURL, "://")
		if !ok || strings.ContainsAny(scheme, "@:/") {
			return "(unparsable)"
		}
		return scheme + "://(unparsable)"
	}
	if q := u.Query(); q.Has("password") || q.Has("sentinel_password") {
		for _, k := range []string{"password", "sentinel_password"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
