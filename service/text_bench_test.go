package service

import "testing"

// BenchmarkTextStream is a model's reply as a textStream takes it: four pieces of a few
// words between two writes, each write taken and committed, 200 words a reply.
func BenchmarkTextStream(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var t textStream
		for range 50 {
			for range 4 {
				t.add("word ")
			}
			if _, _, ok := t.take(); ok {
				t.commit()
			}
		}
		if t.length != 1000 || len(t.written.String()) != 1000 {
			b.Fatalf("%d code points, %d bytes written", t.length, len(t.written.String()))
		}
	}
}
