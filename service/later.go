package service

import "fmt"

// later is a read that may be made on a goroutine of its own, for a caller with other
// reads to make meanwhile: on a store across the network their waits then overlap instead
// of adding up. On a store in this process a read costs no round trip, and is made when
// it is waited for, as a plain call would be.
type later[T any] struct {
	read func() (T, error) // set until a read made in wait has been made
	done chan struct{}     // closed when the goroutine's read ended; nil for none
	v    T
	err  error
}

// readLater returns read to be waited for: started now on its own goroutine when async,
// else made by the first wait. A panic in a goroutine's read is its error.
func readLater[T any](async bool, read func() (T, error)) *later[T] {
	if !async {
		return &later[T]{read: read}
	}
	l := &later[T]{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer func() {
			if p := recover(); p != nil {
				l.err = fmt.Errorf("a read panicked: %v", p)
			}
		}()
		l.v, l.err = read()
	}()
	return l
}

// wait returns what the read returned, waiting for it to end (or making it).
func (l *later[T]) wait() (T, error) {
	if l.done != nil {
		<-l.done
	} else if l.read != nil {
		l.v, l.err = l.read()
		l.read = nil
	}
	return l.v, l.err
}
