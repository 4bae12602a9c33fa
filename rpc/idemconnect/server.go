package idemconnect

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemwire"
	"github.com/idem-dev/idem/rpc/internal/core"
)

// ServerOptions configure NewServerInterceptor. The zero value protects
// every unary procedure that gets a key.
type ServerOptions struct {
	// Tenant identifies the caller from the request headers (its TLS
	// state is nil: Connect's interceptors do not see the connection).
	// nil means idemhttp.CredentialTenant, the HTTP middleware's default:
	// a hash of every credential the call carries (Authorization, Cookie,
	// the API-key headers of idemhttp.CallerCredentialHeaders()), compared
	// exactly; a keyed call with none is refused (Unauthenticated).
	Tenant func(h http.Header, cs *tls.ConnectionState) (string, bool)
	// RequireKey refuses a unary call without a key (InvalidArgument
	// missing_key); otherwise it passes through unprotected.
	RequireKey bool
	// Procedures, when set, says which procedures ("/pkg.Service/Method")
	// are protected; the others pass through.
	Procedures func(procedure string) bool
}

// NewServerInterceptor returns the handler-side interceptor: each unary
// call with an Idempotency-Key header (gRPC and gRPC-Web metadata
// "idempotency-key" are the same header) runs at most once per caller and
// key through eng, and every other call with the key gets the first one's
// outcome, its response message or its error with its details. Streaming
// calls pass through untouched.
func NewServerInterceptor(eng *idem.Engine, o ServerOptions) connect.Interceptor {
	return &server{eng: eng, o: o, opts: core.Options{Tenant: o.Tenant, RequireKey: o.RequireKey}}
}

type server struct {
	eng  *idem.Engine
	o    ServerOptions
	opts core.Options
}

func (s *server) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (s *server) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (s *server) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		if req.Spec().IsClient || s.o.Procedures != nil && !s.o.Procedures(proc) {
			return next(ctx, req)
		}
		c, ok, p := core.Prepare(s.eng, &s.opts, proc, req.Header().Values(idemwire.HeaderName), req.Header(), nil, req.Any())
		if p != nil {
			return nil, problem(p)
		}
		if !ok {
			return next(ctx, req)
		}
		var resp connect.AnyResponse
		var herr error
		a := core.Run(ctx, s.eng, c, func(ctx context.Context) core.Outcome {
			resp, herr = next(ctx, req)
			return outcome(resp, herr)
		})
		switch {
		case a.Ran:
			if !a.KeyExpires.IsZero() {
				exp := core.HTTPDate(a.KeyExpires)
				var ce *connect.Error
				if herr == nil && resp != nil {
					resp.Header().Set(idemwire.ExpiresHeader, exp)
				} else if errors.As(herr, &ce) {
					ce.Meta().Set(idemwire.ExpiresHeader, exp)
				}
			}
			return resp, herr
		case a.Replay != nil:
			h := http.Header{}
			h.Set(idemwire.ReplayedHeader, "true")
			if !a.KeyExpires.IsZero() {
				h.Set(idemwire.ExpiresHeader, core.HTTPDate(a.KeyExpires))
			}
			if a.Replay.Status != nil {
				ce := errorOf(a.Replay.Status)
				for k, v := range h {
					ce.Meta()[k] = v
				}
				return nil, ce
			}
			r, err := response(a.Replay.Message)
			if err != nil {
				return nil, err
			}
			for k, v := range h {
				r.Header()[k] = v
			}
			return r, nil
		case a.Problem != nil:
			return nil, problem(a.Problem)
		default:
			return nil, connect.NewError(connect.CodeOf(a.Err), a.Err)
		}
	}
}

// response makes the replayed message a response. Connect's handler sends
// any message its codec can encode; the message is built from its
// descriptor (dynamicpb), since the type parameter of the handler's
// response is not known here.
func response(m proto.Message) (connect.AnyResponse, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(proto.MessageName(m))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("idem: not a message: "+string(proto.MessageName(m))))
	}
	dm := dynamicpb.NewMessage(md)
	b, err := proto.Marshal(m)
	if err == nil {
		err = proto.Unmarshal(b, dm)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(dm), nil
}

// outcome is what the handler's return values record.
func outcome(resp connect.AnyResponse, err error) core.Outcome {
	if err != nil {
		return core.Outcome{Status: statusOf(err)}
	}
	m, ok := resp.Any().(proto.Message)
	if !ok {
		return core.Outcome{Status: &spb.Status{Code: int32(connect.CodeInternal), Message: "idem: the response is not a protobuf message"}}
	}
	return core.Outcome{Message: m}
}
