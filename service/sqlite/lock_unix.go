//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// lockable says whether lockFile keeps other processes off the file (see
// Store.SoleWriter).
const lockable = true

// lockFile takes an exclusive flock(2) on the file at path, creating it. The lock belongs
// to the open file, so it also keeps out a second Store of the same process, and the
// operating system drops it when the process dies, however it dies.
func lockFile(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrPermission) {
		f, err = os.Open(path) // flock needs no write access; let SQLite say what is wrong
	}
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f.Close, nil // closing the file releases the lock
}
