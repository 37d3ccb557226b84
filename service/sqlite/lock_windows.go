package sqlite

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockable says whether lockFile keeps other processes off the file (see
// Store.SoleWriter).
const lockable = true

// lockFile takes an exclusive lock on the file at path, creating it. Windows drops the
// lock when the process dies.
func lockFile(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	var ol windows.Overlapped
	err = windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if err != nil {
		f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, errLocked
		}
		return nil, err
	}
	return f.Close, nil // closing the handle releases the lock
}
