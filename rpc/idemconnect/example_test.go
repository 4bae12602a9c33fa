package idemconnect_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/rpc/idemconnect"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store/memory"
)

// A transfer sent twice with one key (a retry after a lost answer) runs
// once; the retry gets the first answer back.
func Example() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()

	// The handler, with the interceptor.
	ledger := rpctest.NewLedger()
	mux := http.NewServeMux()
	mux.Handle(rpctest.Procedure, connect.NewUnaryHandler(rpctest.Procedure,
		func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
			res, err := ledger.Transfer(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(res), nil
		},
		connect.WithInterceptors(idemconnect.NewServerInterceptor(eng, idemconnect.ServerOptions{}))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The client: one key per call, kept across its retries.
	client := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+rpctest.Procedure,
		connect.WithInterceptors(idemconnect.NewClientInterceptor(idemconnect.ClientOptions{})))
	for range 2 {
		req := connect.NewRequest(rpctest.Transfer("t-42", 100))
		req.Header().Set("Authorization", "Bearer alice-token")
		req.Header().Set("Idempotency-Key", "transfer-42")
		res, err := client.CallUnary(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s, replayed %q\n", rpctest.Describe(res.Msg, nil), res.Header().Get("Idempotent-Replayed"))
	}
	fmt.Println("executions:", ledger.Total())
	// Output:
	// execution 1 of t-42, replayed ""
	// execution 1 of t-42, replayed "true"
	// executions: 1
}
