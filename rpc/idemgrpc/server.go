package idemgrpc

import (
	"context"
	"crypto/tls"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/rpc/internal/core"
)

// ServerOptions configure UnaryServerInterceptor. The zero value protects
// every unary method that gets a key.
type ServerOptions struct {
	// Tenant identifies the caller from the call's metadata, given as an
	// http.Header (keys in canonical form: "authorization" is
	// "Authorization"), and the connection's TLS state (nil without TLS):
	// the arguments of idemhttp's credential rule. nil means
	// idemhttp.CredentialTenant, the HTTP middleware's default: a hash of
	// every credential the call carries (authorization, cookie, the
	// API-key headers of idemhttp.CallerCredentialHeaders(), the TLS client
	// certificate), compared exactly; a keyed call with none is
	// refused (Unauthenticated), since callers without credentials cannot
	// be told apart. Sharing keys between all callers on purpose is
	// func(http.Header, *tls.ConnectionState) (string, bool) { return "", true }.
	Tenant func(h http.Header, cs *tls.ConnectionState) (string, bool)
	// RequireKey refuses a unary call without a key (InvalidArgument
	// missing_key); otherwise it passes through unprotected.
	RequireKey bool
	// Methods, when set, says which methods (full names,
	// "/pkg.Service/Method") are protected; the others pass through.
	Methods func(fullMethod string) bool
}

// UnaryServerInterceptor runs each unary call with an idempotency key at
// most once per caller and key through eng, and answers every other call
// with the key with the first one's outcome: its response message, or its
// status with its details. See the package documentation for the codes of
// idem's own answers.
func UnaryServerInterceptor(eng *idem.Engine, o ServerOptions) grpc.UnaryServerInterceptor {
	opts := core.Options{Tenant: o.Tenant, RequireKey: o.RequireKey}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if o.Methods != nil && !o.Methods(info.FullMethod) {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		c, ok, p := core.Prepare(eng, &opts, info.FullMethod, md.Get(core.KeyName), header(md), tlsState(ctx), req)
		if p != nil {
			return nil, problem(ctx, p)
		}
		if !ok {
			return handler(ctx, req)
		}
		var resp any
		var herr error
		a := core.Run(ctx, eng, c, func(ctx context.Context) core.Outcome {
			resp, herr = handler(ctx, req)
			return outcome(resp, herr)
		})
		switch {
		case a.Ran:
			if !a.KeyExpires.IsZero() {
				_ = grpc.SetHeader(ctx, metadata.Pairs(core.ExpiresKey, core.HTTPDate(a.KeyExpires)))
			}
			return resp, herr
		case a.Replay != nil:
			md := metadata.Pairs(core.ReplayedKey, "true")
			if !a.KeyExpires.IsZero() {
				md.Set(core.ExpiresKey, core.HTTPDate(a.KeyExpires))
			}
			_ = grpc.SetHeader(ctx, md)
			if a.Replay.Status != nil {
				return nil, status.ErrorProto(a.Replay.Status)
			}
			return a.Replay.Message, nil
		case a.Problem != nil:
			return nil, problem(ctx, a.Problem)
		default:
			return nil, status.FromContextError(a.Err).Err()
		}
	}
}

// outcome is what the handler's return values record.
func outcome(resp any, err error) core.Outcome {
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err) // Unknown for other errors, as the server sends them
		}
		return core.Outcome{Status: st.Proto()}
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return core.Outcome{Status: &spb.Status{Code: 13, Message: "idem: the response is not a protobuf message"}}
	}
	return core.Outcome{Message: m}
}

// problem sends p: its expiry and pushback as trailers (they reach the
// client with the status, also in a trailers-only answer), its status.
func problem(ctx context.Context, p *core.Problem) error {
	if h := p.Header(); len(h) > 0 {
		md := metadata.MD{}
		for k, v := range h {
			md.Set(k, v)
		}
		_ = grpc.SetTrailer(ctx, md)
	}
	return status.ErrorProto(p.Status())
}

// tlsState is the TLS state of the call's connection, nil without TLS.
func tlsState(ctx context.Context) *tls.ConnectionState {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			return &ti.State
		}
	}
	return nil
}

// header is the call's metadata as an http.Header, the form the tenant
// functions read, so that a call's credentials are judged as an HTTP
// request's are.
func header(md metadata.MD) http.Header {
	h := make(http.Header, len(md))
	for k, vs := range md {
		h[http.CanonicalHeaderKey(k)] = vs
	}
	return h
}
