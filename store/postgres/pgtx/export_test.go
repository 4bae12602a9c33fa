package pgtx

// SetBeforeCommit makes s call f between a completion's UPDATE and its COMMIT.
func SetBeforeCommit(s *Store, f func()) { s.beforeCommit = f }

// Stall keeps the renewals of s from reaching the server while on is set,
// as a stopped process's never do: its holders' leases run out.
func Stall(s *Store, on bool) { s.stalled.Store(on) }

// Pending counts the open transactions of s.
func Pending(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}
