package service

import "fmt"

// later is a read made on a goroutine of its own, for a caller with other reads to make
// meanwhile: their waits overlap instead of adding up.
type later[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// readLater starts read; wait returns what it returned. A panic in read is its error.
func readLater[T any](read func() (T, error)) *later[T] {
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

// wait waits for the read to end and returns what it returned.
func (l *later[T]) wait() (T, error) {
	<-l.done
	return l.v, l.err
}
