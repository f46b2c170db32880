package redisstore

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
// The client heeds its contexts' deadlines (ContextTimeoutEnabled), so
// that Options.Timeout bounds a call's reads and writes, not only
// read_timeout. The caller closes the client.
func Dial(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: redis URL: %w", err)
	}
	q := u.Query()
	cluster := strings.HasSuffix(u.Scheme, "+cluster")
	if cluster {
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		rawURL = u.String()
	}
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: sentinel URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o), nil
	case cluster || q.Has("addr"):
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: cluster URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	default:
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: redis URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	}
}
