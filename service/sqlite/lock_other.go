//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || windows)

package sqlite

// lockable says whether lockFile keeps other processes off the file (see
// Store.SoleWriter).
const lockable = false

// lockFile does nothing where there is no flock: two Stores on one file then both work,
// serialised by SQLite's own locks.
func lockFile(path string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
