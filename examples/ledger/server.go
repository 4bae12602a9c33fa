package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
)

// Service is the ledger behind idem: the idempotency records live in the
// same database as the ledger, and each transfer commits together with its
// record.
type Service struct {
	Pool   *pgxpool.Pool
	Ledger Ledger
	Store  *pgtx.Store
	Engine *idem.Engine

	// hook, when set (by the crash tests), is told where a transfer is:
	// "reserved" when its key is held, "written" when its rows are written
	// and not yet committed.
	hook func(point string)
}

// NewService migrates the ledger and the idempotency records into schema
// and returns the service. opts are the engine's (a clock, a logger).
func NewService(ctx context.Context, pool *pgxpool.Pool, schema string, policy idem.Policy, opts ...idem.Option) (*Service, error) {
	if err := (Ledger{Schema: schema}).Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, pool, postgres.Options{Schema: schema}); err != nil {
		return nil, err
	}
	return openService(pool, schema, policy, opts...)
}

// openService is NewService without the migrations.
func openService(pool *pgxpool.Pool, schema string, policy idem.Policy, opts ...idem.Option) (*Service, error) {
	l := Ledger{Schema: schema}
	ps, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		return nil, err
	}
	s := pgtx.New(ps)
	return &Service{Pool: pool, Ledger: l, Store: s, Engine: idem.New(s, policy, opts...)}, nil
}

// Close stops the engine's background work and the store's listener for
// waiters; the pool stays open, as it belongs to the caller.
func (s *Service) Close() error {
	_ = s.Engine.Close()
	return s.Store.Close()
}

// TransferScope is the scope of transfers made through the Go API.
const TransferScope = "transfers"

// Transfer makes req once per key, through the Go API: the way a worker
// or a message consumer would call the ledger.
func (s *Service) Transfer(ctx context.Context, key string, req TransferRequest) (Transfer, idem.Result, error) {
	fp, err := idem.HashJSON(req)
	if err != nil {
		return Transfer{}, idem.Result{}, err
	}
	res, err := s.Store.Do(ctx, s.Engine, idem.Call{Scope: TransferScope, Key: key, Fingerprint: fp},
		func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			s.at("reserved")
			h, _ := idem.HoldFrom(ctx)
			t, err := s.Ledger.Transfer(ctx, tx, h.ID, req)
			if err != nil {
				return nil, err
			}
			s.at("written")
			return json.Marshal(t)
		})
	if err != nil {
		return Transfer{}, res, err
	}
	var t Transfer
	err = json.Unmarshal(res.Value, &t)
	return t, res, err
}

func (s *Service) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

// Handler serves the HTTP API:
//
//	POST /transfers        {"from":"alice","to":"bob","amount_cents":500}
//	                       with an Idempotency-Key header (required)
//	GET  /accounts/{id}    {"id":"alice","balance_cents":9500}
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transfers", s.postTransfer)
	mux.HandleFunc("GET /accounts/{id}", s.getAccount)
	return idemhttp.Middleware(s.Engine, idemhttp.Options{
		// One ledger: a transfer's key is the same transfer whoever sends
		// it (the callers are the bank's own services, which send no
		// credentials).
		Tenant: idemhttp.TenantNone,
		Routes: []idemhttp.Route{{Pattern: "POST /transfers", Key: idemhttp.KeyRequired}},
	})(mux)
}

func (s *Service) postTransfer(w http.ResponseWriter, r *http.Request) {
	var req TransferRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, "the body is not a transfer: "+err.Error())
		return
	}
	// The transaction of this request's idempotency record: the transfer
	// commits with the record of its outcome, after this handler returns.
	tx, err := s.Store.Tx(r.Context())
	if err != nil {
		problem(w, http.StatusInternalServerError, "no transaction: "+err.Error())
		return
	}
	h, _ := idem.HoldFrom(r.Context())
	t, err := s.Ledger.Transfer(r.Context(), tx, h.ID, req)
	if err == nil {
		s.at("written")
	}
	switch {
	case errors.Is(err, ErrInsufficientFunds), errors.Is(err, ErrNoAccount):
		// Not a cached status: the key is released (and the transaction
		// rolled back), so the client may retry once the account is funded.
		problem(w, http.StatusUnprocessableEntity, err.Error())
		return
	case err != nil:
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(t)
}

func (s *Service) getAccount(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b, err := s.Ledger.Balance(r.Context(), s.Pool, id)
	switch {
	case errors.Is(err, ErrNoAccount):
		problem(w, http.StatusNotFound, "no account "+id)
		return
	case err != nil:
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "balance_cents": b})
}

// problem writes an RFC 9457 problem.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}
