// Package openapi holds the OpenAPI 3.1 document of Sluice's HTTP API,
// openapi.json, which the server serves at GET /v1/openapi.json. Its test
// holds the document and the server to each other: every route the server
// has is in the document and every path and method of the document is a
// route; and real requests to a real server, for the routes and statuses
// the test lists, are validated against it.
package openapi

import _ "embed"

// JSON is the document, the bytes of openapi.json.
//
//go:embed openapi.json
var JSON []byte
