package nats

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
)

// subjects names what a Cluster sends on NATS, so that a subject names no session and no
// replica: where one would (a session's events, a replica's commands) it ends in a token,
// a keyed hash of the ID (HMAC-SHA256 under a key derived from the bus secret, its first
// 128 bits in base64url). Only the replicas can tell whose subject a token is: a member of
// NATS sees neither which sessions are active nor what the replicas are called, and two
// deployments with secrets of their own never share a subject, whatever their replicas'
// names. A message is sealed for the subject it is sent on (see sealer), and so for the
// one session or replica whose token that is.
type subjects struct {
	prefix string
	macs   *sync.Pool // of HMAC-SHA256 under the subject key: one costs 8 allocations to make
}

// tokenSize is how many bytes of the hash a token keeps: 22 characters of base64url.
const tokenSize = 16

// newSubjects derives the subject key from secret (which newSealer checks).
func newSubjects(secret []byte, prefix string) (subjects, error) {
	key, err := hkdf.Key(sha256.New, secret, nil, "talkgraph bus subjects v1", sha256.Size)
	macs := &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
	return subjects{prefix: prefix, macs: macs}, err
}

// events is the subject of a session's events.
func (s subjects) events(session string) string { return s.named("ev", session) }

// viewer is the subject that tells a user's viewer log grew.
func (s subjects) viewer(user string) string { return s.named("vw", user) }

// commands is the subject of the commands for a replica.
func (s subjects) commands(replica string) string { return s.named("cmd", replica) }

// left is the subject of the announcements of replicas that shut down: it names nobody.
func (s subjects) left() string { return s.prefix + ".left" }

func (s subjects) named(kind, id string) string {
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(id))
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	s.macs.Put(m)
	var token [(tokenSize*4 + 2) / 3]byte // base64url of tokenSize bytes, unpadded
	base64.RawURLEncoding.Encode(token[:], sum[:tokenSize])
	return s.prefix + "." + kind + "." + string(token[:])
}
