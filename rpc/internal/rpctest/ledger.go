package rpctest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Procedure is the ledger's one unary method.
const (
	Service   = "idem.test.Ledger"
	Procedure = "/" + Service + "/Transfer"
)

// Ledger is the service: Transfer records a transfer per request and
// answers its execution number. A request's "ref" names it; "fail" makes
// it fail with that gRPC code (after running); "sleep_ms" holds it.
type Ledger struct {
	mu    sync.Mutex
	runs  map[string]int
	first map[string]int
	begun map[string]int
	seq   int
}

func NewLedger() *Ledger {
	return &Ledger{runs: map[string]int{}, first: map[string]int{}, begun: map[string]int{}}
}

// Begun returns how many executions of ref began (a held one before it
// ends).
func (l *Ledger) Begun(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.begun[ref]
}

// WaitBegun waits until an execution of ref began, and reports whether one
// did within 10 s.
func (l *Ledger) WaitBegun(ref string) bool {
	for range 1000 {
		if l.Begun(ref) > 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Transfer is the method's logic, the same for both frameworks.
func (l *Ledger) Transfer(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	f := req.GetFields()
	l.mu.Lock()
	l.begun[f["ref"].GetStringValue()]++
	l.mu.Unlock()
	if ms := f["sleep_ms"].GetNumberValue(); ms > 0 {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	ref := f["ref"].GetStringValue()
	l.mu.Lock()
	l.seq++
	n := l.seq
	l.runs[ref]++
	if l.first[ref] == 0 {
		l.first[ref] = n
	}
	l.mu.Unlock()
	if c := f["fail"].GetNumberValue(); c != 0 {
		return nil, status.Errorf(codes.Code(c), "transfer %s failed (execution %d)", ref, n)
	}
	return structpb.NewStruct(map[string]any{"ref": ref, "execution": float64(n), "amount": f["amount"].GetNumberValue()})
}

// Runs returns how many times ref ran.
func (l *Ledger) Runs(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[ref]
}

// First returns the number of ref's first execution, 0 when it never ran.
func (l *Ledger) First(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first[ref]
}

// Total returns how many transfers ran.
func (l *Ledger) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Duplicates returns how many executions ran beyond one per ref.
func (l *Ledger) Duplicates() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := 0
	for _, n := range l.runs {
		d += n - 1
	}
	return d
}

// ledgerServer is the HandlerType grpc.RegisterService checks.
type ledgerServer interface {
	Transfer(context.Context, *structpb.Struct) (*structpb.Struct, error)
}

// ServiceDesc is the ledger's grpc-go service, written out as generated
// code would.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: Service,
	HandlerType: (*ledgerServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Transfer",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return srv.(ledgerServer).Transfer(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: Procedure}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return srv.(ledgerServer).Transfer(ctx, req.(*structpb.Struct))
			})
		},
	}},
	Streams: []grpc.StreamDesc{},
}

// Transfer is a request.
func Transfer(ref string, amount float64) *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{"ref": ref, "amount": amount})
	if err != nil {
		panic(err)
	}
	return s
}

// Execution reads the execution number of a Transfer's answer.
func Execution(res *structpb.Struct) int {
	return int(res.GetFields()["execution"].GetNumberValue())
}

// Describe names a response for a test's message.
func Describe(res *structpb.Struct, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("execution %d of %s", Execution(res), res.GetFields()["ref"].GetStringValue())
}
