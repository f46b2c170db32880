package wire

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice"
)

// AppendJSON appends r as encoding/json encodes it, byte for byte
// (TestAppendJSONIsEncodingJSON), without reflection: a decision's answer
// is the one body on every request's path.
func (r *CheckResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = r.Decision.appendFields(append(b, ','), false)
	if r.Error != "" {
		b = appendString(append(b, `,"error":`...), r.Error)
	}
	if r.Message != "" {
		b = appendString(append(b, `,"message":`...), r.Message)
	}
	if len(r.Violated) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, p := range r.Violated {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, p)
		}
		b = append(b, ']')
	}
	b = append(b, `,"decisions":`...)
	if r.Decisions == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i := range r.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.Decisions[i].appendFields(append(b, '{'), true)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// AppendResult appends the body of res's answer, FromResult(res) as
// AppendJSON encodes it, without building it but for a denial.
func AppendResult(b []byte, res sluice.Result) []byte {
	if !res.Allowed {
		out := FromResult(res) // with its error, message and violated policies
		return out.AppendJSON(b)
	}
	top := FromDecision(res.Decision)
	b = top.appendFields(append(b, `{"allowed":true,`...), false)
	b = append(b, `,"decisions":[`...)
	for i := range res.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		d := FromDecision(res.Decisions[i])
		b = d.appendFields(append(b, '{'), true)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendFields appends d's members, with "allowed" if withAllowed (the
// embedded decision of a CheckResponse has it shadowed by the top level's).
func (d *Decision) appendFields(b []byte, withAllowed bool) []byte {
	b = appendString(append(b, `"policy":`...), d.Policy)
	if withAllowed {
		b = strconv.AppendBool(append(b, `,"allowed":`...), d.Allowed)
	}
	b = strconv.AppendInt(append(b, `,"limit":`...), d.Limit, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), d.Remaining, 10)
	b = strconv.AppendInt(append(b, `,"resetAt":`...), d.ResetAt, 10)
	b = strconv.AppendInt(append(b, `,"retryAfter":`...), d.RetryAfter, 10)
	b = strconv.AppendInt(append(b, `,"retryAfterMs":`...), d.RetryAfterMs, 10)
	if l := d.Lease; l != nil {
		b = append(b, `,"lease":{`...)
		if l.Token != "" {
			b = appendString(append(b, `"token":`...), l.Token)
			b = append(b, ',')
		}
		b = appendString(append(b, `"id":`...), l.ID)
		b = strconv.AppendInt(append(b, `,"expiresAtMs":`...), l.ExpiresAtMs, 10)
		b = append(b, '}')
	}
	if d.Shadowed {
		b = append(b, `,"shadowed":true`...)
	}
	if d.FailedOpen {
		b = append(b, `,"failedOpen":true`...)
	}
	if d.FailedClosed {
		b = append(b, `,"failedClosed":true`...)
	}
	return b
}

// appendString appends s quoted as encoding/json quotes it: as it is if
// it is printable ASCII that needs no escape (policy names, lease ids),
// else by encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// bodies are the buffers of WriteResult's bodies.
var bodies = sync.Pool{New: func() any { return new([]byte) }}

// WriteResult answers res with status and the body of FromResult(res), as
// WriteJSON would, in one write from a reused buffer.
func WriteResult(w http.ResponseWriter, status int, res sluice.Result) {
	bp := bodies.Get().(*[]byte)
	b := append(AppendResult((*bp)[:0], res), '\n')
	setJSONHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may be gone; nothing to do
	if cap(b) <= 64<<10 {
		*bp = b
		bodies.Put(bp)
	}
}

// setJSONHeaders sets the headers of every JSON answer, as Header.Set
// would, in one allocation.
func setJSONHeaders(h http.Header) {
	v := []string{"application/json", "no-store"}
	h["Content-Type"] = v[:1:1]
	h["Cache-Control"] = v[1:2:2]
}
