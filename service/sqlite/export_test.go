package sqlite

// OnCompactSlice makes s call f after each of Compact's transactions, with how many
// streams it folded and how many are left. Set it before Compact is called.
func OnCompactSlice(s *Store, f func(done, left int)) { s.compactSliced = f }
