// Package web holds the demo page of the WebSocket gateway, embedded in
// the binary. It serves one fixed page: unlike the AWS sample's page
// server, no request names a file.
package web

import (
	_ "embed"
	"net/http"
)

//go:embed index.html
var index []byte

// Handler serves the demo page at "/" and nothing else.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws: wss:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write(index)
	})
}
