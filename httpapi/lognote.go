package httpapi

import "net/http"

// tenantNoter is a ResponseWriter that records, for the request's log
// line, the tenant the request was authenticated as or decided for: the
// server's request log, beneath any other wrapper.
type tenantNoter interface{ NoteTenant(tenant string) }

// noteTenant tells the request log of w, if any, that the request is
// tenant's, walking the wrappers' Unwrap as http.ResponseController does.
// A path names whatever tenant its caller writes; only a tenant the API
// authenticated or decided for is noted, so that a caller cannot choose
// how the log samples its lines.
func noteTenant(w http.ResponseWriter, tenant string) {
	for w != nil {
		if n, ok := w.(tenantNoter); ok {
			n.NoteTenant(tenant)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
