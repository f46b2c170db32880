package sluice

import (
	"errors"
	"fmt"
)

// Kind classifies an error for callers that branch on it. Transports map
// kinds to status codes in one place (httpapi).
type Kind uint8

const (
	// KindInternal is a bug or an unexpected failure.
	KindInternal Kind = iota
	// KindInvalid is bad input; Error.Field names the culprit.
	KindInvalid
	// KindNotFound is a missing thing: an unknown lease, tenant or policy.
	KindNotFound
	// KindUnavailable is a store that is closed, full or unreachable. The
	// policy's fail mode decides what the caller sees.
	KindUnavailable
	// KindConflict is a write that clashes with what exists, such as a
	// tenant id already taken.
	KindConflict
	// KindUnauthorized is a missing or unknown credential.
	KindUnauthorized
	// KindForbidden is a valid credential reaching for what is not its own.
	KindForbidden
	// KindGone is a thing that existed and is no more, such as a closed
	// WebSocket connection (410, as API Gateway's management API).
	KindGone
	// KindExhausted is a request refused for want of a shared resource:
	// a queue full, an upstream's share that would come too late (429).
	// A limit's denial is a decision, never an error.
	KindExhausted
)

func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindNotFound:
		return "not_found"
	case KindUnavailable:
		return "unavailable"
	case KindConflict:
		return "conflict"
	case KindUnauthorized:
		return "unauthorized"
	case KindForbidden:
		return "forbidden"
	case KindGone:
		return "gone"
	case KindExhausted:
		return "exhausted"
	}
	return "internal"
}

// Sentinel errors that callers compare with errors.Is.
var (
	// ErrStoreClosed is returned by every store method after Close.
	ErrStoreClosed = &Error{Kind: KindUnavailable, Message: "store closed"}
	// ErrStoreFull is returned when a new key would exceed a store's key
	// cap; existing keys keep working.
	ErrStoreFull = &Error{Kind: KindUnavailable, Message: "store full: key cap reached"}
	// ErrLeaseNotFound is returned when releasing or renewing a lease that
	// was released, has expired, or never existed.
	ErrLeaseNotFound = &Error{Kind: KindNotFound, Message: "lease not found or expired"}

	// ErrShortage is an upstream's request whose estimated or actual wait
	// for its fair share exceeds its maximum wait (package fairshare): the
	// caller should refuse it (429) instead of waiting.
	ErrShortage = &Error{Op: "fairshare", Kind: KindExhausted, Message: "wait would exceed the maximum wait"}
	// ErrQueueFull is an upstream's request whose customer already has
	// as many requests waiting as its queue holds (package fairshare).
	ErrQueueFull = &Error{Op: "fairshare", Kind: KindExhausted, Message: "customer queue full"}
	// ErrUpstreamClosed is a call to an upstream's quota after it closed:
	// a server shutting down (package fairshare).
	ErrUpstreamClosed = &Error{Op: "fairshare", Kind: KindUnavailable, Message: "closed"}
)

// Error is Sluice's error type: a kind to branch on, the operation that
// failed, and for bad input the field at fault.
type Error struct {
	// Op is the operation that failed, e.g. "engine.check".
	Op   string
	Kind Kind
	// Field is the path of the offending input field, e.g.
	// "checks[0].policy.limit", for KindInvalid.
	Field   string
	Message string
	// Err is the underlying error, if any.
	Err error
}

// Invalid returns a KindInvalid error for field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	var s string
	if e.Op != "" {
		s = e.Op + ": "
	}
	if e.Field != "" {
		s += e.Field + " "
	}
	s += e.Message
	if e.Err != nil {
		if e.Message != "" {
			s += ": "
		}
		s += e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// In returns a copy of e with its field placed under prefix, so that
// "limit" checked in checks[2].policy reads "checks[2].policy.limit".
func (e *Error) In(prefix string) *Error {
	c := *e
	switch {
	case c.Field == "":
		c.Field = prefix
	case c.Field[0] == '[':
		c.Field = prefix + c.Field
	default:
		c.Field = prefix + "." + c.Field
	}
	return &c
}

// KindOf returns the kind of the first *Error in err's chain, or
// KindInternal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// FieldOf returns the offending field of an invalid-input error, or "".
func FieldOf(err error) string {
	for err != nil {
		if e, ok := err.(*Error); ok && e.Field != "" {
			return e.Field
		}
		err = errors.Unwrap(err)
	}
	return ""
}

// WithOp wraps err with the operation that failed, keeping its kind.
func WithOp(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Kind: KindOf(err), Err: err}
}
