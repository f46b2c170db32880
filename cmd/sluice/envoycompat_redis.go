package main

import (
	"fmt"
	"net/url"
	"strings"
)

// The reference's Redis variables (REDIS_*), read in the compatible mode
// into --store redis, --redis-url and --redis-ca. They are read only when
// $REDIS_URL is set: without it the counters are in serve's own --store
// (by default this node's embedded store), never at the reference's
// default socket, /var/run/nutcracker/ratelimit.sock, which a server of
// Sluice has no reason to find.

// redisRules are the compatible mode's rules of the reference's Redis
// variables; compatRules holds them.
var redisRules = []compatRule{
	{flag: "store", vars: []string{"REDIS_URL"}, value: func(get func(string) string) (string, error) {
		if get("REDIS_URL") == "" {
			return "", nil
		}
		return "redis", nil
	}},
	{flag: "redis-url", vars: []string{"REDIS_URL", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS", "REDIS_POOL_SIZE"},
		value: redisURL},
	{flag: "redis-ca", vars: []string{"REDIS_TLS_CACERT"}, value: stringValue("REDIS_TLS_CACERT")},
	{vars: []string{"REDIS_TLS_CLIENT_CERT"}, value: refuseSet("REDIS_TLS_CLIENT_CERT", "client certificates to Redis are not offered: Sluice authenticates to Redis with $REDIS_AUTH (a password, or user:password)")},
	{vars: []string{"REDIS_TLS_CLIENT_KEY"}, value: refuseSet("REDIS_TLS_CLIENT_KEY", "client certificates to Redis are not offered: Sluice authenticates to Redis with $REDIS_AUTH (a password, or user:password)")},
	{vars: []string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}, value: refuseTrue("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "Sluice always checks the Redis server's name against its certificate; give the CA of its certificate in $REDIS_TLS_CACERT")},
	{vars: []string{"REDIS_PERSECOND"}, value: boolValue("REDIS_PERSECOND"), note: "per-second limits are counted in the one store with the others ($REDIS_URL's); $REDIS_PERSECOND_* are not read"},
}

// redisURL is --redis-url of the reference's variables, in go-redis's
// forms that store/redisstore.Dial takes: $REDIS_TYPE single, cluster or
// sentinel; $REDIS_SOCKET_TYPE tcp or unix (the reference's default);
// $REDIS_AUTH a password or user:password; $REDIS_TLS; $REDIS_POOL_SIZE.
func redisURL(get func(string) string) (string, error) {
	addrs := get("REDIS_URL")
	if addrs == "" {
		return "", nil
	}
	tls, err := refBool(get, "REDIS_TLS")
	if err != nil {
		return "", err
	}
	q := url.Values{}
	if get("REDIS_POOL_SIZE") != "" {
		n, err := refInt(get, "REDIS_POOL_SIZE")
		if err != nil || n < 1 {
			return "", fmt.Errorf("$REDIS_POOL_SIZE=%q: want a number of connections, 1 or more", get("REDIS_POOL_SIZE"))
		}
		q.Set("pool_size", fmt.Sprint(n))
	}
	user := userinfo(get("REDIS_AUTH"))
	socket := strings.ToLower(get("REDIS_SOCKET_TYPE"))
	if socket == "" {
		socket = "unix"
	}
	if socket != "unix" && socket != "tcp" {
		return "", fmt.Errorf("$REDIS_SOCKET_TYPE=%q: want tcp or unix", get("REDIS_SOCKET_TYPE"))
	}
	scheme := "redis"
	if tls {
		scheme = "rediss"
	}
	u := url.URL{Scheme: scheme, User: user}
	switch kind := strings.ToLower(get("REDIS_TYPE")); kind {
	case "", "single":
		if socket == "unix" {
			if tls {
				return "", fmt.Errorf("$REDIS_TLS=%s with $REDIS_SOCKET_TYPE=unix: TLS is for tcp", get("REDIS_TLS"))
			}
			u.Scheme, u.Path = "unix", addrs
			break
		}
		u.Host = addrs
	case "cluster":
		// A comma-separated list of nodes: the first the URL's host, the
		// others addr= (go-redis's seed nodes).
		if socket == "unix" {
			return "", fmt.Errorf("$REDIS_TYPE=%s with $REDIS_SOCKET_TYPE=unix: a cluster is reached over tcp", get("REDIS_TYPE"))
		}
		nodes := strings.Split(addrs, ",")
		u.Scheme += "+cluster"
		u.Host = strings.TrimSpace(nodes[0])
		for _, n := range nodes[1:] {
			q.Add("addr", strings.TrimSpace(n))
		}
	case "sentinel":
		// "master,sentinel1:port,sentinel2:port": go-redis's user
		// information is the sentinels' ($REDIS_SENTINEL_AUTH), the
		// server's password a query.
		if socket == "unix" {
			return "", fmt.Errorf("$REDIS_TYPE=%s with $REDIS_SOCKET_TYPE=unix: sentinels are reached over tcp", get("REDIS_TYPE"))
		}
		parts := strings.Split(addrs, ",")
		if len(parts) < 2 || parts[0] == "" {
			return "", fmt.Errorf("$REDIS_URL=%q: with $REDIS_TYPE=sentinel, want the master's name and its sentinels, \"name,host:port[,host:port...]\"", addrs)
		}
		q.Set("master_name", parts[0])
		u.Host = strings.TrimSpace(parts[1])
		for _, s := range parts[2:] {
			q.Add("addr", strings.TrimSpace(s))
		}
		if user != nil {
			if name := user.Username(); name != "" {
				q.Set("username", name)
			}
			if pw, ok := user.Password(); ok {
				q.Set("password", pw)
			}
		}
		u.User = userinfo(get("REDIS_SENTINEL_AUTH"))
	default:
		return "", fmt.Errorf("$REDIS_TYPE=%q: want single, cluster or sentinel", get("REDIS_TYPE"))
	}
	if u.Host == "" && u.Path == "" {
		return "", fmt.Errorf("$REDIS_URL=%q: names no server", addrs)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// userinfo is the URL's user information of a reference's auth: a
// password alone, or user:password; nil for none.
func userinfo(auth string) *url.Userinfo {
	if auth == "" {
		return nil
	}
	if name, pw, ok := strings.Cut(auth, ":"); ok {
		return url.UserPassword(name, pw)
	}
	return url.UserPassword("", auth)
}
