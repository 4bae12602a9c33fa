package idemgrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/rpc/idemgrpc"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store/memory"
)

// A transfer sent twice with one key (a retry after a lost answer) runs
// once; the retry gets the first answer back.
func Example() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()

	// The server: the interceptor in front of every unary method.
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(eng, idemgrpc.ServerOptions{})))
	ledger := rpctest.NewLedger()
	srv.RegisterService(&rpctest.ServiceDesc, ledger)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	// The client: one key per call, kept across its retries.
	cc, _ := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})))
	defer cc.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-token")
	ctx = idemgrpc.WithKey(ctx, "transfer-42")
	for range 2 {
		var header metadata.MD
		res := new(structpb.Struct)
		err := cc.Invoke(ctx, rpctest.Procedure, rpctest.Transfer("t-42", 100), res, grpc.Header(&header))
		fmt.Println(rpctest.Describe(res, err), "replayed:", header.Get("idempotent-replayed"))
	}
	fmt.Println("executions:", ledger.Total())
	// Output:
	// execution 1 of t-42 replayed: []
	// execution 1 of t-42 replayed: [true]
	// executions: 1
}
