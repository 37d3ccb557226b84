//go:build !linux

package sqlite_test

import "errors"

// setImmutable is Linux's chattr +i; elsewhere root has no flag a test can set.
func setImmutable(string, bool) error {
	return errors.New("no immutable flag on this system")
}
