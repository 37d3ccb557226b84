//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

// freeBytes is unknown here: Ping relies on its probe write alone.
func freeBytes(dir string) (uint64, bool) { return 0, false }
