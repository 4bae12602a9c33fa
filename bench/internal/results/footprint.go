package results

// Footprint is one store holding Keys live records (durable
// reserve+complete pairs with a 130-byte stored response): what a key
// costs in memory, and how long a restart takes.
type Footprint struct {
	Store string `json:"store"`
	Keys  int    `json:"keys"`
	// FillSeconds is how long writing the pairs took, from 64 clients.
	FillSeconds float64 `json:"fill_seconds"`
	// BytesPerKey is the memory a live key costs, as MemoryWhat says
	// (the process's RSS growth, the server's used memory, or bytes on
	// disk for a store that keeps its records there).
	BytesPerKey float64 `json:"bytes_per_key"`
	MemoryWhat  string  `json:"memory_what"`
	// RestartBytesPerKey is BytesPerKey after a restart (embedded stores).
	RestartBytesPerKey float64 `json:"restart_bytes_per_key,omitempty"`
	// DiskBytes is the store's directory (embedded stores, Redis) or
	// relation size (PostgreSQL).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// RestartSeconds: open after a clean stop; KillRestartSeconds: after
	// a kill -9 while open, with KillKeys more keys written since the
	// clean stop; ReplaySeconds: with no snapshot, the whole log replayed
	// (the file store). RestartWhat says what was restarted.
	RestartSeconds     float64 `json:"restart_seconds"`
	KillRestartSeconds float64 `json:"kill_restart_seconds,omitempty"`
	KillKeys           int     `json:"kill_keys,omitempty"`
	ReplaySeconds      float64 `json:"replay_seconds,omitempty"`
	RestartWhat        string  `json:"restart_what"`
	// Err is why the measurement stopped, if it did.
	Err string `json:"error,omitempty"`
}

// Churn is the file store's log under churn at one TTL: the largest ratio
// of the log's bytes to its live data, after a Cleanup and before one.
type Churn struct {
	TTL string `json:"ttl"`
	// Cleanup is how often Cleanup ran: "every second", or "none" (the
	// log's own rotation reclaims).
	Cleanup string  `json:"cleanup,omitempty"`
	Pairs   int64   `json:"pairs"`
	After   float64 `json:"after_cleanup"`
	Before  float64 `json:"before_cleanup"`
	// Command is the command that measured it.
	Command string `json:"command"`
}
