package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDashboardFiles: the page and its files, each with its type and the
// strict policy; any other path is 404.
func TestDashboardFiles(t *testing.T) {
	h := Dashboard()
	for path, ctype := range map[string]string{
		"/dashboard":                   "text/html; charset=utf-8",
		"/dashboard/":                  "text/html; charset=utf-8",
		"/dashboard/dashboard.js":      "text/javascript; charset=utf-8",
		"/dashboard/dashboard.css":     "text/css; charset=utf-8",
		"/dashboard/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/dashboard/uPlot.min.css":     "text/css; charset=utf-8",
		"/dashboard/uPlot.LICENSE":     "text/plain; charset=utf-8",
	} {
		resp := get(t, h, "GET", path)
		b := body(t, resp)
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, resp.StatusCode, len(b))
		}
		for k, want := range map[string]string{
			"Content-Type":            ctype,
			"X-Content-Type-Options":  "nosniff",
			"Content-Security-Policy": dashboardCSP,
		} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, k, got, want)
			}
		}
		// Revalidated by its ETag.
		if resp := get(t, h, "GET", path, "If-None-Match", resp.Header.Get("ETag")); resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, resp.StatusCode)
		}
	}
	for _, path := range []string{
		"/dashboard/x", "/dashboard/dashboard.html", "/dashboard/dashboard.js/", "/dashboard/Dashboard.js",
		"/dashboard/../web.go", "/dashboard/%2e%2e/web.go", "/dashboard//dashboard.js", "/dashboard/dashboard/dashboard.js",
		"/dashboard/index.html", "/dashboardx", "/",
	} {
		if resp := get(t, h, "GET", path); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp := get(t, h, "POST", "/dashboard"); resp.StatusCode != 404 {
		t.Errorf("POST /dashboard: %d, want 404", resp.StatusCode)
	}
}

// The policy the brief asks for, at least: own files only, no inline
// script, no other server.
func TestDashboardCSP(t *testing.T) {
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "connect-src 'self'", "img-src 'self' data:"} {
		if !strings.Contains(dashboardCSP, d+";") && !strings.HasSuffix(dashboardCSP, d) {
			t.Errorf("the CSP lacks %q: %s", d, dashboardCSP)
		}
	}
	if strings.Contains(dashboardCSP, "unsafe-eval") || strings.Contains(dashboardCSP, "script-src 'self' 'unsafe-inline'") {
		t.Errorf("the CSP allows scripts it must not: %s", dashboardCSP)
	}
}

// TestDashboardPageIsSelfContained: the page loads its script from a file
// (the CSP forbids inline script), names no other server, and has no
// inline event handlers.
func TestDashboardPageIsSelfContained(t *testing.T) {
	h := Dashboard()
	page := body(t, get(t, h, "GET", "/dashboard"))
	for _, m := range regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(page, -1) {
		if !strings.Contains(m[1], `src="/dashboard/`) || strings.TrimSpace(m[2]) != "" {
			t.Errorf("an inline or foreign script: %s", m[0])
		}
	}
	for _, m := range regexp.MustCompile(`(?i)(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], "/dashboard/") {
			t.Errorf("the page names a file outside the dashboard: %s", m[1])
		}
		if _, ok := dashboardFiles[m[1]]; !ok {
			t.Errorf("the page names a file the dashboard does not serve: %s", m[1])
		}
	}
	if m := regexp.MustCompile(`(?i)\son[a-z]+=`).FindString(page); m != "" {
		t.Errorf("an inline event handler: %q", m)
	}
	js := body(t, get(t, h, "GET", "/dashboard/dashboard.js"))
	if m := regexp.MustCompile(`https?://|//[a-z0-9.-]+\.[a-z]{2,}/|innerHTML|eval\(`).FindString(js); m != "" {
		t.Errorf("dashboard.js reaches off the server or writes HTML: %q", m)
	}
}

// TestVendoredUPlot: the embedded uPlot is npm's uplot as pinned in
// tools/package.json, byte for byte, with its license, which is served.
// tools/node_modules (make deps) must be there with CI=true.
func TestVendoredUPlot(t *testing.T) {
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	raw, err := os.ReadFile("../tools/package.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatal(err)
	}
	version := pkg.Dependencies["uplot"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(version) {
		t.Fatalf("tools/package.json pins uplot at %q, want an exact version", version)
	}
	js, _ := dashboardFS.ReadFile("dashboard/uPlot.iife.min.js")
	if !bytes.HasPrefix(js, []byte("/*! https://github.com/leeoniya/uPlot (v"+version+") */")) {
		t.Errorf("the vendored uPlot is not v%s: %.60q", version, js)
	}
	license := body(t, get(t, Dashboard(), "GET", "/dashboard/uPlot.LICENSE"))
	if !strings.Contains(license, "MIT License") || !strings.Contains(license, "Leon Sorokin") {
		t.Errorf("uPlot's license is not served: %.80q", license)
	}

	dir := filepath.Join("..", "tools", "node_modules", "uplot")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: run make deps (CI=true: the vendored copy must be checked)", dir)
		}
		t.Skipf("%s is missing: run make deps to check the vendored copy", dir)
	}
	var npm struct {
		Version string `json:"version"`
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil || json.Unmarshal(raw, &npm) != nil || npm.Version != version {
		t.Fatalf("tools/node_modules has uplot %q (%v), package.json pins %q: run make deps", npm.Version, err, version)
	}
	for embedded, upstream := range map[string]string{
		"uPlot.iife.min.js": "dist/uPlot.iife.min.js",
		"uPlot.min.css":     "dist/uPlot.min.css",
		"uPlot.LICENSE":     "LICENSE",
	} {
		want, err := os.ReadFile(filepath.Join(dir, upstream))
		if err != nil {
			t.Fatal(err)
		}
		got, err := dashboardFS.ReadFile("dashboard/" + embedded)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("web/dashboard/%s differs from npm's uplot %s/%s: copy it again (cp tools/node_modules/uplot/%s web/dashboard/%s)", embedded, version, upstream, upstream, embedded)
		}
	}
}
