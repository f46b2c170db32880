package kubetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podIP stands for the pod's IP ($(POD_IP)) when the test runs a shape's
// command.
const podIP = "10.9.8.7"

// TestServeTakesTheArgs runs the real `sluice serve` (SLUICE_BINARY, which
// `make test` sets) with each shape's arguments, its mounts made
// directories holding the rendered ConfigMaps' files and fresh secrets:
// serve starts, answers the probes' routes by the Host the kubelet sends
// (the pod's IP) and by the Service's name, refuses another host, and
// stops within the grace period on SIGTERM. The DynamoDB shape runs on a
// table in dynoxide, its endpoint added to the values. Without
// SLUICE_BINARY or dynoxide it is skipped, except in CI (CI=true), where it
// fails.
func TestServeTakesTheArgs(t *testing.T) {
	bin := os.Getenv("SLUICE_BINARY")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SLUICE_BINARY is unset: `make test` sets it to the sluice binary it builds")
		}
		t.Skip("SLUICE_BINARY is unset: `make test` sets it to the sluice binary it builds")
	}
	for _, s := range Shapes {
		t.Run(s.Name, func(t *testing.T) {
			values, err := Values(ChartDir, s)
			if err != nil {
				t.Fatal(err)
			}
			var env []string
			switch s.Name {
			case "dynamodb":
				env = dynamoTable(t, bin, values)
			case "redis":
				env = redisServer(t)
			}
			r := render(t, values)
			srv := r.checkPod(t)
			runServe(t, bin, env, r, srv)
		})
	}
}

// dynamoTable starts dynoxide (the DynamoDB emulator `make deps`
// installs), creates the values' table in it with `sluice dynamodb
// create-table`, and points the values at it. It returns the environment
// that reaches it: static credentials, which the emulator takes.
func dynamoTable(t *testing.T, bin string, values map[string]any) []string {
	t.Helper()
	dynoxide := os.Getenv("SLUICE_DYNOXIDE")
	if dynoxide == "" {
		dynoxide = "../../tools/node_modules/@dynoxide/linux-x64/dynoxide"
	}
	_, err := os.Stat(dynoxide)
	need(t, "dynoxide", err, "run make deps")
	addr := serveOn(t, "dynoxide", func(host, port string) []string { return []string{dynoxide, "serve", "--host", host, "--port", port} })
	endpoint := "http://" + addr
	db := values["dynamodb"].(map[string]any)
	db["endpoint"] = endpoint
	env := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}
	create := exec.Command(bin, "dynamodb", "create-table", "--dynamodb-endpoint", endpoint,
		"--dynamodb-table", fmt.Sprint(db["table"]), "--dynamodb-region", fmt.Sprint(db["region"]))
	create.Env = append(env, "HOME="+t.TempDir())
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("sluice dynamodb create-table: %v\n%s", err, out)
	}
	return env
}

// redisServer starts a redis-server (Debian's package) of the test's own
// and returns the environment that reaches it: the URL the shape's Secret
// would hold.
func redisServer(t *testing.T) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	need(t, "redis-server", err, "apt-get install redis-server")
	dir := t.TempDir()
	addr := serveOn(t, "redis-server", func(host, port string) []string {
		return []string{bin, "--bind", host, "--port", port, "--save", "", "--appendonly", "no", "--dir", dir}
	})
	return []string{"SLUICE_REDIS_URL=redis://" + addr + "/0"}
}

// need skips the test if err says what is missing, or fails it in CI
// (CI=true), with the hint that installs it.
func need(t *testing.T, what string, err error, hint string) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v: %s", what, err, hint)
	}
	t.Skipf("%s: %v: %s", what, err, hint)
}

// serveOn runs the command that command gives for a loopback host and a
// free port until the test ends, and returns its address once it listens.
func serveOn(t *testing.T, what string, command func(host, port string) []string) string {
	t.Helper()
	addr := freeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	argv := command(host, port)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	waitListen(t, what, addr)
	return addr
}

// waitListen waits until what listens on addr, for up to a minute.
func waitListen(t *testing.T, what, addr string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within a minute", what, addr)
		}
	}
}

func runServe(t *testing.T, bin string, env []string, r *rendered, srv *server) {
	root := t.TempDir()
	args := slices.Clone(srv.c.Args)
	// The mounts, longest path first so that no shorter one replaces a
	// part of it.
	paths := make([]string, 0, len(srv.mounts))
	for p, v := range srv.mounts {
		paths = append(paths, p)
		fill(t, filepath.Join(root, p), v, r)
	}
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	for i, a := range args {
		if name, file, ok := strings.Cut(a, "="); ok {
			for _, p := range paths {
				if file == p || strings.HasPrefix(file, p+"/") {
					a = name + "=" + filepath.Join(root, file)
					break
				}
			}
		}
		a = strings.ReplaceAll(a, "$(POD_IP)", podIP)
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=" + httpAddr
		case strings.HasPrefix(a, "--grpc-addr="):
			a = "--grpc-addr=" + grpcAddr
		}
		args[i] = a
	}
	t.Logf("sluice %s", strings.Join(args, " "))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = root // a relative path a shape left (none should) lands here, not in the checkout
	cmd.Env = append(env, "HOME="+root, "TMPDIR="+filepath.Join(root, "tmp"))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("serve's output:\n%s", out)
		}
	}()

	port := fmt.Sprint(srv.httpPort(t))
	client := &http.Client{Timeout: 30 * time.Second} // a hung server fails, not the test's timeout
	get := func(path, host string) int {
		req, err := http.NewRequest("GET", "http://"+httpAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Wait for it to serve, as the startup probe does.
	for deadline := time.Now().Add(time.Minute); get("/healthz", podIP+":"+port) != http.StatusOK; {
		select {
		case err := <-exited:
			t.Fatalf("serve exited before serving: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not answer /healthz within a minute")
		}
	}
	for _, c := range []struct {
		path, host string
		want       int
	}{
		{"/healthz", podIP + ":" + port, 200}, // the kubelet's probes
		{"/readyz", podIP + ":" + port, 200},
		{"/metrics", podIP + ":" + port, 200}, // Prometheus, by the pod's IP
		{"/readyz", "sluice.sluice.svc:" + port, 200},
		{"/readyz", "sluice.sluice.svc.cluster.local", 200},
		{"/metrics", "sluice.sluice.svc:" + port, 200},
		{"/readyz", "evil.example", 200}, // probes answer any host: they tell a page nothing
		{"/metrics", "evil.example", 403},
	} {
		if got := get(c.path, c.host); got != c.want {
			t.Errorf("GET %s with Host %s: %d, want %d", c.path, c.host, got, c.want)
		}
	}
	if _, ok := srv.flags["grpc-addr"]; ok {
		conn, err := net.Dial("tcp", grpcAddr)
		if err != nil {
			t.Errorf("the gRPC port does not listen: %v", err)
		} else {
			conn.Close()
		}
	}

	// SIGTERM: serve drains and exits 0 within the grace period the pod
	// gives it after its preStop sleep.
	grace := time.Duration(*srv.pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(grace):
		t.Errorf("serve still runs %v after SIGTERM: the kubelet would kill it", grace)
	}
}

// fill makes dir hold what the volume v would: a ConfigMap's files, a
// fresh secret for each key of a Secret, nothing for the others.
func fill(t *testing.T, dir string, v corev1.Volume, r *rendered) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	switch {
	case v.ConfigMap != nil:
		for name, text := range r.configMaps[v.ConfigMap.Name].Data {
			write(t, filepath.Join(dir, name), text)
		}
	case v.Secret != nil:
		if len(v.Secret.Items) == 0 {
			t.Fatalf("Secret volume %s names no items: the test cannot know its files", v.Name)
		}
		for _, it := range v.Secret.Items {
			write(t, filepath.Join(dir, it.Path), rand.Text())
		}
	}
}

func write(t *testing.T, file, text string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
