// Package image tests Sluice's container image: `make image` builds it
// (deploy/image/build.sh), and the test reads the OCI layout it wrote,
// checks the image's configuration and every file of its layer, and runs
// it with podman, or, where podman cannot run containers, the unpacked
// binary chrooted into the image's files as the image's user.
package image

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The version and commit the test stamps into the image's binary.
const (
	testVersion = "v0.0.0-imagetest"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	adminKey    = "image-test-admin-key-0123456789"
	uid         = 65532
)

// TestImage builds the image with `make image` and checks it, then runs it.
func TestImage(t *testing.T) {
	for _, tool := range []string{"make", "tar", "umoci", "skopeo"} {
		need(t, tool)
	}
	dir := t.TempDir()
	layout, archive := filepath.Join(dir, "oci"), filepath.Join(dir, "sluice.tar")
	mk := exec.Command("make", "-C", "../..", "image", "IMAGE_DIR="+layout, "IMAGE_ARCHIVE="+archive,
		"VERSION="+testVersion, "COMMIT="+testCommit)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	img := readImage(t, layout, "latest")
	if tagged := readImage(t, layout, testVersion); tagged.digest != img.digest {
		t.Errorf("tag %s is %s, latest %s", testVersion, tagged.digest, img.digest)
	}

	t.Run("config", func(t *testing.T) { checkConfig(t, img.config) })
	root := filepath.Join(dir, "rootfs")
	t.Run("files", func(t *testing.T) { checkFiles(t, img, root) })
	if t.Failed() {
		return // nothing worth running
	}
	t.Run("run", func(t *testing.T) {
		r := newRunner(t, archive, root, img.config.Config)
		if out, err := r.command(nil, "version").CombinedOutput(); err != nil ||
			!strings.Contains(string(out), testVersion) || !strings.Contains(string(out), testCommit) {
			t.Errorf("sluice version: %v, %q: want %s and %s", err, out, testVersion, testCommit)
		}
		// The image's command listens off loopback, which needs the admin key.
		out, err := r.command(nil).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "without an admin key") {
			t.Errorf("without SLUICE_ADMIN_KEY: %v, %q: want a refusal naming the admin key", err, out)
		}
		serveImage(t, r)
		t.Run("as ratelimit", func(t *testing.T) { serveRatelimit(t, r) })
	})
}

// need fails the test if tool is missing with CI=true, and skips it
// otherwise: make deps installs every tool.
func need(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no %s: run make deps (CI=true: a missing tool is a failure)", tool)
	}
	t.Skipf("no %s: run make deps", tool)
}

// ociImage is an image of an OCI layout: its manifest's digest, its
// configuration and its layers' blob paths.
type ociImage struct {
	digest string
	config ociConfig
	layers []string
}

// ociConfig holds the fields of an OCI image configuration the test reads.
type ociConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
}

// runConfig is how the image runs: its configuration's "config".
type runConfig struct {
	User         string
	WorkingDir   string
	Entrypoint   []string
	Cmd          []string
	Env          []string
	Volumes      map[string]struct{}
	ExposedPorts map[string]struct{}
	Labels       map[string]string
	StopSignal   string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

// readImage reads the image tagged tag of the OCI layout.
func readImage(t *testing.T, layout, tag string) ociImage {
	t.Helper()
	blob := func(digest string) string {
		alg, hex, _ := strings.Cut(digest, ":")
		return filepath.Join(layout, "blobs", alg, hex)
	}
	decode := func(path string, v any) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var index struct{ Manifests []descriptor }
	decode(filepath.Join(layout, "index.json"), &index)
	i := slices.IndexFunc(index.Manifests, func(d descriptor) bool {
		return d.Annotations["org.opencontainers.image.ref.name"] == tag
	})
	if i < 0 {
		t.Fatalf("no image tagged %q in %s", tag, layout)
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	decode(blob(index.Manifests[i].Digest), &manifest)
	img := ociImage{digest: index.Manifests[i].Digest}
	decode(blob(manifest.Config.Digest), &img.config)
	for _, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer %s is %s, want a gzipped tar", l.Digest, l.MediaType)
		}
		img.layers = append(img.layers, blob(l.Digest))
	}
	return img
}

func checkConfig(t *testing.T, c ociConfig) {
	if c.OS != "linux" || c.Architecture == "" {
		t.Errorf("platform %s/%s, want linux", c.OS, c.Architecture)
	}
	cfg := c.Config
	if cfg.User != fmt.Sprintf("%d:%d", uid, uid) {
		t.Errorf("user %q, want %d:%d, not root", cfg.User, uid, uid)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/sluice"}) {
		t.Errorf("entrypoint %q, want [/sluice]", cfg.Entrypoint)
	}
	if cfg.WorkingDir != "/data" {
		t.Errorf("working directory %q, want /data, where /bin/ratelimit's ./sluice-data is written", cfg.WorkingDir)
	}
	if want := []string{"serve", "--addr", ":8080", "--data-dir", "/data"}; !slices.Equal(cfg.Cmd, want) {
		t.Errorf("cmd %q, want %q", cfg.Cmd, want)
	}
	if _, ok := cfg.Volumes["/data"]; !ok || len(cfg.Volumes) != 1 {
		t.Errorf("volumes %v, want /data", cfg.Volumes)
	}
	for _, p := range []string{"8080/tcp", "8081/tcp"} {
		if _, ok := cfg.ExposedPorts[p]; !ok {
			t.Errorf("exposed ports %v lack %s", cfg.ExposedPorts, p)
		}
	}
	if cfg.StopSignal != "SIGTERM" {
		t.Errorf("stop signal %q, want SIGTERM", cfg.StopSignal)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testCommit,
		"org.opencontainers.image.source":   "https://github.com/sluicehq/sluice",
	} {
		if got := cfg.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
}

// checkFiles checks that the image's one layer holds exactly the files
// Sluice needs, with their owners and modes, and unpacks it into root.
func checkFiles(t *testing.T, img ociImage, root string) {
	if len(img.layers) != 1 {
		t.Fatalf("%d layers, want 1", len(img.layers))
	}
	type entry struct {
		mode     fs.FileMode
		uid, gid int
		link     string // a symbolic link's target
	}
	want := map[string]entry{
		"sluice":                            {0o755, 0, 0, ""},
		"bin/":                              {fs.ModeDir | 0o755, 0, 0, ""},
		"bin/ratelimit":                     {fs.ModeSymlink | 0o777, 0, 0, "/sluice"},
		"etc/":                              {fs.ModeDir | 0o755, 0, 0, ""},
		"etc/passwd":                        {0o644, 0, 0, ""},
		"etc/group":                         {0o644, 0, 0, ""},
		"etc/ssl/":                          {fs.ModeDir | 0o755, 0, 0, ""},
		"etc/ssl/certs/":                    {fs.ModeDir | 0o755, 0, 0, ""},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0, ""},
		"tmp/":                              {fs.ModeDir | fs.ModeSticky | 0o777, 0, 0, ""},
		"data/":                             {fs.ModeDir | 0o750, uid, uid, ""},
	}
	got := map[string]entry{}
	files := unpack(t, img.layers[0], root, func(h *tar.Header) {
		got[h.Name] = entry{h.FileInfo().Mode(), h.Uid, h.Gid, h.Linkname}
	})
	for name, e := range got {
		if w, ok := want[name]; !ok {
			t.Errorf("unexpected file %s (%v) in the image: it holds only what sluice needs, no shell", name, e.mode)
		} else if e != w {
			t.Errorf("%s: mode %v, owner %d:%d, link %q; want %v, %d:%d, %q", name, e.mode, e.uid, e.gid, e.link, w.mode, w.uid, w.gid, w.link)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s is missing from the image", name)
		}
	}

	bin, err := elf.NewFile(bytes.NewReader(files["sluice"]))
	if err != nil {
		t.Fatalf("/sluice: %v", err)
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/sluice names a dynamic loader: it must be static (CGO_ENABLED=0), the image has no libc")
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), fmt.Sprintf("sluice:x:%d:%d:", uid, uid)) {
		t.Errorf("/etc/passwd does not name the user sluice, %d:\n%s", uid, files["etc/passwd"])
	}
	if !x509.NewCertPool().AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"]) {
		t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificate: DynamoDB over HTTPS needs them")
	}
}

// unpack extracts the gzipped tar layer into root, calling seen with each
// header, and returns the contents of its regular files.
func unpack(t *testing.T, layer, root string, seen func(*tar.Header)) map[string][]byte {
	f, err := os.Open(layer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		} else if err != nil {
			t.Fatal(err)
		}
		seen(h)
		path := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, root+string(filepath.Separator)) {
			t.Fatalf("%q leaves the root", h.Name)
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				files[h.Name] = b
				err = os.WriteFile(path, b, 0o600)
			}
		case tar.TypeSymlink:
			// Its target is read in the image's root (a chroot's, a
			// container's), never here: os.Symlink only writes it.
			err = os.Symlink(h.Linkname, path)
		default:
			t.Fatalf("%s: tar entry type %c, want only files, directories and links", h.Name, h.Typeflag)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			err = os.Chmod(path, mode&fs.ModePerm|mode&fs.ModeSticky)
		}
		if err == nil && os.Geteuid() == 0 {
			err = os.Lchown(path, h.Uid, h.Gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runner runs the image: with podman, in a store of the test's own, or
// with the unpacked binary chrooted into root as the image's user.
type runner struct {
	podman []string // podman and its global flags; nil to run the binary
	image  string
	root   string
	config runConfig
}

// newRunner loads archive into a podman store of the test's own and
// returns a runner of podman if it runs a container here; else a runner
// of the binary unpacked in root, saying why in the test's log.
func newRunner(t *testing.T, archive, root string, c runConfig) *runner {
	r := &runner{root: root, config: c, image: "docker.io/library/sluice:" + testVersion}
	why := podman(t, r, archive)
	if why == "" {
		t.Log("running the image with podman")
		return r
	}
	if os.Getenv("CI") == "true" && strings.HasPrefix(why, "no podman") {
		t.Fatalf("%s: run make deps (CI=true: a missing tool is a failure)", why)
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s, and the unpacked binary runs as the image's user only as root", why)
	}
	t.Logf("%s: running the unpacked binary chrooted into the image's files, as %s", why, c.User)
	r.podman = nil
	return r
}

// podman sets r to run the image with podman, and returns "" if a
// container runs, or why not.
func podman(t *testing.T, r *runner, archive string) string {
	if _, err := exec.LookPath("podman"); err != nil {
		return "no podman"
	}
	// A store, state and runtime directory of the test's own, so that two
	// runs side by side meet nowhere; vfs needs no overlay mounts.
	dir := t.TempDir()
	r.podman = []string{"podman", "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--storage-driver", "vfs", "--events-backend", "none"}
	if _, err := exec.LookPath("runc"); err == nil {
		// crun refuses a host of both cgroup versions (this one).
		r.podman = append(r.podman, "--runtime", "runc")
	}
	if out, err := exec.Command(r.podman[0], append(r.podman[1:], "load", "--quiet", "--input", archive)...).CombinedOutput(); err != nil {
		t.Fatalf("podman load %s: %v\n%s", archive, err, out) // the archive is wrong, wherever podman runs
	}
	out, err := r.command(nil, "version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("podman cannot run a container here (%v: %s)", err, bytes.TrimSpace(out))
	}
	return ""
}

// command returns the command running the image with env and args (the
// image's command if none), on the host's network.
func (r *runner) command(env []string, args ...string) *exec.Cmd {
	return r.commandOf("", env, args...)
}

// commandOf is command with the program entry of the image in place of
// its entrypoint, if not empty: the image's command is not given it.
func (r *runner) commandOf(entry string, env []string, args ...string) *exec.Cmd {
	if r.podman != nil {
		// The runtime may not raise a limit over the host's here: podman's
		// defaults do, so the container gets the host's open files and
		// fewer processes.
		var nofile syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
		a := append(r.podman[1:], "run", "--rm", "--pull=never", "--network=host",
			"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Max), "--ulimit", "nproc=4096:4096")
		for _, e := range env {
			a = append(a, "--env", e)
		}
		if entry != "" {
			a = append(a, "--entrypoint", entry)
		}
		return exec.Command(r.podman[0], append(append(a, r.image), args...)...)
	}
	program := r.config.Entrypoint
	if entry != "" {
		program = []string{entry}
	} else if len(args) == 0 {
		args = r.config.Cmd
	}
	cmd := exec.Command(program[0], append(program[1:], args...)...)
	cmd.Env = append(slices.Clone(r.config.Env), env...)
	cmd.Dir = cmp.Or(r.config.WorkingDir, "/")
	u, g, _ := strings.Cut(r.config.User, ":")
	uid, _ := strconv.Atoi(u)
	gid, _ := strconv.Atoi(g)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.root,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd
}

// container is a run of the image.
type container struct {
	cmd     *exec.Cmd
	log     bytes.Buffer
	exited  chan error // its exit, once; a reader that takes it puts it back
	stopped bool
}

// startContainer starts cmd, a run of the image. At the test's end, it is
// stopped if the test did not stop it, and its output logged if the test
// failed.
func startContainer(t *testing.T, cmd *exec.Cmd) *container {
	c := &container{cmd: cmd, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = &c.log, &c.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if !c.stopped {
			// SIGTERM, which podman passes on: killed, podman would leave
			// the container running.
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				<-c.exited
			}
		}
		if t.Failed() {
			t.Logf("the container's output:\n%s", c.log.String())
		}
	})
	return c
}

// stop stops the container with SIGTERM, and fails the test unless it
// exits with status 0.
func (c *container) stop(t *testing.T) {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.stopped = true
	if err := <-c.exited; err != nil {
		t.Errorf("after SIGTERM: %v, want a clean exit", err)
	}
}

// serveImage runs the image's command given the admin key, off loopback
// on a free port, and checks that it answers /healthz and /readyz, decides
// a limit with its store on /data, and stops on SIGTERM with status 0.
func serveImage(t *testing.T, r *runner) {
	port := freePort(t)
	// The image's command with its address moved off :8080, which another
	// run may hold on this host's network; the last --addr wins.
	args := append(slices.Clone(r.config.Cmd), "--addr", "0.0.0.0:"+port)
	c := startContainer(t, r.command([]string{"SLUICE_ADMIN_KEY=" + adminKey}, args...))

	base := "http://127.0.0.1:" + port
	if err := waitHealthy(base+"/healthz", c.exited); err != nil {
		t.Fatal(err)
	}
	if code, _ := call(t, "GET", base+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("/readyz: %d, want 200 (the pebble store on /data)", code)
	}
	check := `{"tenant": "acme", "checks": [{"key": "u-1", "policy": {"name": "one", "algorithm": "fixed_window", "limit": 1, "window": "60s"}}]}`
	if code, body := call(t, "POST", base+"/v1/check", "", check); code != http.StatusUnauthorized {
		t.Errorf("a decision without the admin key: %d %s, want 401", code, body)
	}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if code, body := call(t, "POST", base+"/v1/check", adminKey, check); code != want {
			t.Errorf("decision %d: %d %s, want %d", i+1, code, body, want)
		}
	}

	c.stop(t)
}

// serveRatelimit runs the image as a Deployment of envoyproxy/ratelimit
// does, /bin/ratelimit with the reference's variables alone, and checks
// that it serves the compatible mode: gRPC health under "ratelimit",
// /healthcheck and /json on the HTTP port, decisions with the store in
// /data, and, without an admin key, nothing of Sluice's HTTP API.
func serveRatelimit(t *testing.T, r *runner) {
	httpPort, grpcPort := freePort(t), freePort(t)
	// The configuration's directory, /tmp: empty.
	env := []string{"PORT=" + httpPort, "GRPC_PORT=" + grpcPort, "RUNTIME_ROOT=/", "RUNTIME_APPDIRECTORY=tmp", "USE_STATSD=false"}
	c := startContainer(t, r.commandOf("/bin/ratelimit", env))
	base := "http://127.0.0.1:" + httpPort
	if err := waitHealthy(base+"/healthcheck", c.exited); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, "GET", base+"/healthcheck", "", ""); code != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	if code, _ := call(t, "GET", base+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("/readyz: %d, want 200 (the pebble store in /data)", code)
	}
	code, body := call(t, "POST", base+"/json", "", `{"domain": "none", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`)
	var resp struct{ OverallCode string }
	if json.Unmarshal([]byte(body), &resp); code != http.StatusOK || resp.OverallCode != "OK" {
		t.Errorf("/json: %d %s, want 200 and overallCode OK", code, body)
	}
	if code, body := call(t, "POST", base+"/v1/check", "", `{}`); code != http.StatusNotFound {
		t.Errorf("Sluice's API without an admin key: %d %s, want 404", code, body)
	}

	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit: %v %v, want SERVING", h, err)
	}
	c.stop(t)
}

// waitHealthy waits for url to answer 200, or for the process to exit
// (its error put back into exited).
func waitHealthy(url string, exited chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the container exited before %s answered: %v", url, err)
		case <-ctx.Done():
			return errors.New("no answer from " + url + " in two minutes")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// call sends a request with the bearer key, if any, and returns the
// status and body.
func call(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freePort returns a TCP port free on this host a moment ago.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
