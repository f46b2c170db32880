package envoyrls

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fairshare"
)

// Every kind has its gRPC code, and a gRPC status shows what an HTTP answer
// shows: the field and the message, never an internal error's text.
func TestGRPCStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{sluice.Invalid("descriptors[0].key", "is too long"), codes.InvalidArgument, "descriptors[0].key is too long"},
		{&sluice.Error{Op: "dynamostore.decide", Kind: sluice.KindUnavailable, Message: "the store is unavailable", Err: errors.New("dial tcp 10.0.0.7:8000: refused")}, codes.Unavailable, "the store is unavailable"},
		{errors.New("disk on fire at /secret/path"), codes.Internal, "internal error"},
		{sluice.ErrTenantChanged, codes.AlreadyExists, "tenant changed since it was read"},
		{&sluice.Error{Kind: sluice.KindForbidden, Message: "no"}, codes.PermissionDenied, "no"},
		{fairshare.ErrShortage, codes.ResourceExhausted, "wait would exceed the maximum wait"},
	} {
		st, _ := status.FromError(grpcStatus(tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%v: %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}
