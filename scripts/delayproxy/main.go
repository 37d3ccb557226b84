// Command delayproxy forwards TCP connections from one loopback address to another,
// holding back every read for a set delay in each direction: a database or a broker as
// far away as across a network, for measuring what the server's round trips cost there
// (docs/PERFORMANCE.md). It refuses any address that is not on loopback.
//
//	go run ./scripts/delayproxy -listen 127.0.0.1:15432 -to 127.0.0.1:5432 -delay 500us
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:15432", "loopback address to accept on")
	to := flag.String("to", "127.0.0.1:5432", "loopback address to forward to")
	delay := flag.Duration("delay", 500*time.Microsecond, "how long each read is held back, each way (a round trip costs twice this)")
	flag.Parse()
	for _, a := range []string{*listen, *to} {
		if err := loopback(a); err != nil {
			fmt.Fprintln(os.Stderr, "delayproxy:", err)
			os.Exit(2)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("forwarding %s to %s, %v each way", *listen, *to, *delay)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, *to, *delay)
	}
}

// loopback refuses an address whose host is not a loopback IP.
func loopback(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("%q is not a loopback IP address and port", addr)
	}
	return nil
}

func serve(c net.Conn, to string, delay time.Duration) {
	defer c.Close()
	u, err := net.Dial("tcp", to)
	if err != nil {
		log.Print(err)
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { pipe(u, c, delay); done <- struct{}{} }()
	go func() { pipe(c, u, delay); done <- struct{}{} }()
	<-done
}

// pipe copies from src to dst, each chunk read written delay after it arrived, in order.
func pipe(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if d := time.Until(ch.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(ch.b); err != nil {
			io.Copy(io.Discard, src)
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}
