package sqlite

import "errors"

// errLocked is lockFile's answer when another Store holds the lock.
var errLocked = errors.New("lock is held by another process")
