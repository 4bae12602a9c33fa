// Package rpctest holds the rigs of the gRPC and Connect interceptors'
// tests: a ledger service without generated code (structpb messages, a
// hand-written grpc.ServiceDesc, Connect's generic handlers) that counts
// its executions, and a TCP proxy that loses answers after the server ran
// the call.
package rpctest
