package pgtx

// SetBeforeCommit makes s call f between a completion's UPDATE and its COMMIT.
func SetBeforeCommit(s *Store, f func()) { s.beforeCommit = f }

// Pending counts the open transactions of s.
func Pending(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}
