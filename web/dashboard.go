package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

// The dashboard's files: its page, script and style, and uPlot (MIT),
// vendored from npm (tools/package.json pins the version; the package's
// test checks the copy).
//
//go:embed dashboard
var dashboardFS embed.FS

// dashboardFile is one file the dashboard serves.
type dashboardFile struct {
	body  []byte
	ctype string
	etag  string
}

// dashboardFiles maps each path the dashboard answers to its file: a fixed
// list, read once. No part of a request's path reaches a file system.
var dashboardFiles = func() map[string]dashboardFile {
	files := map[string]dashboardFile{}
	for path, f := range map[string]struct{ name, ctype string }{
		"/dashboard":                   {"dashboard.html", "text/html; charset=utf-8"},
		"/dashboard/":                  {"dashboard.html", "text/html; charset=utf-8"},
		"/dashboard/dashboard.js":      {"dashboard.js", "text/javascript; charset=utf-8"},
		"/dashboard/dashboard.css":     {"dashboard.css", "text/css; charset=utf-8"},
		"/dashboard/uPlot.iife.min.js": {"uPlot.iife.min.js", "text/javascript; charset=utf-8"},
		"/dashboard/uPlot.min.css":     {"uPlot.min.css", "text/css; charset=utf-8"},
		"/dashboard/uPlot.LICENSE":     {"uPlot.LICENSE", "text/plain; charset=utf-8"},
	} {
		b, err := dashboardFS.ReadFile("dashboard/" + f.name)
		if err != nil {
			panic("web: the dashboard's " + f.name + " is not embedded: " + err.Error())
		}
		sum := sha256.Sum256(b)
		files[path] = dashboardFile{b, f.ctype, `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return files
}()

// dashboardCSP lets the page load only its own files and call only its own
// server: no inline script, no CDN. Inline styles are allowed for uPlot,
// which sizes its elements in style attributes.
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Dashboard serves the operator's dashboard: the page at /dashboard (and
// /dashboard/) and its files under /dashboard/, a fixed list; any other
// path is 404. The page reads the /v1 routes with the key its user gives
// it, behind the same walls as any other client; it holds no data itself.
func Dashboard() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := dashboardFiles[r.URL.Path]
		if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("Content-Security-Policy", dashboardCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Revalidated on every load, so that a new binary's page is
		// never mixed with an old script.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}
