package main

import (
	"strings"
	"testing"
)

// TestRedisURLOfReferenceVariables: the reference's REDIS_* variables make
// the --redis-url that store/redisstore.Dial takes, or an error naming the
// variable at fault; without $REDIS_URL, none.
func TestRedisURLOfReferenceVariables(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // the URL, or a part of the error
	}{
		{map[string]string{}, ""},
		{map[string]string{"REDIS_URL": "/run/redis.sock"}, "unix:///run/redis.sock"},
		{map[string]string{"REDIS_URL": "10.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp"}, "redis://10.0.0.1:6379"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_SOCKET_TYPE": "TCP", "REDIS_AUTH": "s3cret", "REDIS_TLS": "true", "REDIS_POOL_SIZE": "20"},
			"rediss://:s3cret@r:6379?pool_size=20"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_AUTH": "app:p@ss"}, "redis://app:p%40ss@r:6379"},
		{map[string]string{"REDIS_URL": "a:7000, b:7001,c:7002", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER"},
			"redis+cluster://a:7000?addr=b%3A7001&addr=c%3A7002"},
		{map[string]string{"REDIS_URL": "main,s1:26379,s2:26379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_AUTH": "pw", "REDIS_SENTINEL_AUTH": "spw"},
			"redis://:spw@s1:26379?addr=s2%3A26379&master_name=main&password=pw"},
		{map[string]string{"REDIS_URL": "main", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel"}, "the master's name and its sentinels"},
		{map[string]string{"REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "ring"}, "$REDIS_TYPE=\"ring\""},
		{map[string]string{"REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "udp"}, "$REDIS_SOCKET_TYPE=\"udp\""},
		{map[string]string{"REDIS_URL": "/s.sock", "REDIS_TLS": "true"}, "TLS is for tcp"},
		{map[string]string{"REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TLS": "yes"}, "$REDIS_TLS=\"yes\""},
		{map[string]string{"REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_POOL_SIZE": "0"}, "$REDIS_POOL_SIZE=\"0\""},
		{map[string]string{"REDIS_URL": "a:1", "REDIS_TYPE": "cluster"}, "over tcp"},
	} {
		got, err := redisURL(func(k string) string { return tc.env[k] })
		if err != nil {
			got = err.Error()
			if strings.Contains(got, "pw") || strings.Contains(got, "s3cret") {
				t.Errorf("%v: the error shows a password: %s", tc.env, got)
			}
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) || err == nil && got != tc.want {
			t.Errorf("%v: %q, want %q", tc.env, got, tc.want)
		}
	}
}
