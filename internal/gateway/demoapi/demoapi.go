package demoapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// API is the demo payments API. Its zero value is not usable; call New.
type API struct {
	mux *http.ServeMux

	mu         sync.Mutex
	charges    int            // guarded by mu
	executions map[string]int // guarded by mu; by key label
}

// New returns an API with no charges.
func New() *API {
	a := &API{mux: http.NewServeMux(), executions: map[string]int{}}
	a.mux.HandleFunc("POST /charges", a.charge)
	a.mux.HandleFunc("GET /stats", a.stats)
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Charge is the demo's answer to POST /charges.
type Charge struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Count          int    `json:"count"` // charges executed so far, this one included
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	User           string `json:"user,omitempty"`
	RequestID      string `json:"request_id,omitempty"`
	Error          string `json:"error,omitempty"`
}

func (a *API) charge(w http.ResponseWriter, r *http.Request) {
	status := http.StatusCreated
	if s := r.URL.Query().Get("status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 200 || n > 599 {
			http.Error(w, "status must be 200..599", http.StatusBadRequest)
			return
		}
		status = n
	}
	var delay time.Duration
	if d := r.URL.Query().Get("delay"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v < 0 || v > time.Minute {
			http.Error(w, "delay must be a duration up to 1m", http.StatusBadRequest)
			return
		}
		delay = v
	}
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		http.Error(w, "body must be JSON such as {\"amount\": 1000, \"currency\": \"eur\"}", http.StatusBadRequest)
		return
	}

	key := r.Header.Get("Idempotency-Key")
	user := r.Header.Get("X-User-ID")
	label := key
	if label == "" {
		label = "(no key)"
	}
	if user != "" {
		label = user + "/" + label
	}
	// The execution counts from the moment it starts, as a real charge
	// would be made before the answer goes out.
	a.mu.Lock()
	a.charges++
	n := a.charges
	a.executions[label]++
	a.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	c := Charge{
		ID:             fmt.Sprintf("ch_%06d", n),
		Amount:         in.Amount,
		Currency:       in.Currency,
		Count:          n,
		IdempotencyKey: key,
		User:           user,
		RequestID:      r.Header.Get("X-Request-Id"),
	}
	if status >= 300 {
		c.Error = http.StatusText(status)
	} else {
		w.Header().Set("Location", "/charges/"+c.ID)
	}
	w.Header().Set("X-Charge-Count", strconv.Itoa(n))
	writeJSON(w, status, c)
}

// Stats is the answer to GET /stats.
type Stats struct {
	Charges    int            `json:"charges"`
	Executions map[string]int `json:"executions"`
}

func (a *API) stats(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	s := Stats{Charges: a.charges, Executions: make(map[string]int, len(a.executions))}
	for k, v := range a.executions {
		s.Executions[k] = v
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, s)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
