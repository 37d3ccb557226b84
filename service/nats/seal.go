package nats

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// A sealer seals what a replica sends on the bus and opens what it receives, so that
// nothing on NATS can be read, forged or altered by anyone without the bus key: every
// message is XChaCha20-Poly1305 with a key derived from the bus secret and a random
// nonce, and is good for one purpose only, named by its additional data (the subject it
// was sent on, or for a reply the request it answers). Sealed inside with the body are
// when it was sent, a random ID and the sending replica, so that a receiver can refuse
// what is stale or seen before.
//
// An envelope is: the version (1 byte), the nonce (24 bytes), then the sealed header and
// body: sent at (8 bytes, unix nanoseconds), the ID (16 bytes), the sender's length (1
// byte) and name, the body.
type sealer struct {
	aead   cipher.AEAD
	maxAge time.Duration

	mu   sync.Mutex
	last int64 // the latest sent-at time given out (see stamp)
}

const (
	envelopeVersion = 1
	nonceSize       = chacha20poly1305.NonceSizeX
	idSize          = 16
	// minSecret is the least bytes of secret a bus key is derived from.
	minSecret = 16
)

// Why a message was dropped, as the dropped counters name it.
const (
	dropUnopenable = "unopenable" // not sealed with this bus's key, altered, or sent for another purpose
	dropStale      = "stale"      // sent longer ago than MaxAge (or that far in the future)
	dropReplayed   = "replayed"   // seen before
)

var (
	errUnopenable = errors.New("the message does not open with the bus key")
	errStale      = errors.New("the message is stale")
)

// newSealer derives the bus key from secret (at least minSecret bytes).
func newSealer(secret []byte, maxAge time.Duration) (*sealer, error) {
	if len(secret) < minSecret {
		return nil, errors.New("the bus secret is shorter than 16 bytes")
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "talkgraph bus v1", chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, maxAge: maxAge}, nil
}

// opened is what a sealed message holds.
type opened struct {
	sentAt time.Time
	id     [idSize]byte
	sender string
	body   []byte
}

// stamp returns a time to send a message at: now, or just after the latest given out,
// so that one replica's messages carry strictly increasing times (a receiver refuses an
// event batch of a session whose time is not after the last it took from that sender).
func (s *sealer) stamp() int64 {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now <= s.last {
		now = s.last + 1
	}
	s.last = now
	return now
}

// seal seals body for the purpose ad, as sent now by sender, and returns the envelope and
// the message's ID.
func (s *sealer) seal(ad []byte, sender string, body []byte) (env []byte, id [idSize]byte) {
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on the platforms Go supports
	}
	if len(sender) > 255 {
		sender = sender[:255]
	}
	plainLen := 8 + idSize + 1 + len(sender) + len(body)
	env = make([]byte, 1+nonceSize, 1+nonceSize+plainLen+s.aead.Overhead())
	env[0] = envelopeVersion
	if _, err := rand.Read(env[1 : 1+nonceSize]); err != nil {
		panic(err)
	}
	// The plaintext is made in the room after the nonce, and sealed in place.
	plain := env[len(env) : len(env)+plainLen]
	binary.BigEndian.PutUint64(plain, uint64(s.stamp()))
	copy(plain[8:], id[:])
	plain[8+idSize] = byte(len(sender))
	copy(plain[8+idSize+1:], sender)
	copy(plain[8+idSize+1+len(sender):], body)
	env = s.aead.Seal(env[:1+nonceSize], env[1:1+nonceSize], plain, ad)
	return env, id
}

// open opens env, sealed for the purpose ad: errUnopenable when it was not sealed with
// this bus's key for that purpose or was altered, errStale when it was sent longer than
// maxAge before now or after it. env is left as it was.
func (s *sealer) open(ad, env []byte, now time.Time) (opened, error) {
	if len(env) < 1+nonceSize+s.aead.Overhead()+8+idSize+1 || env[0] != envelopeVersion {
		return opened{}, errUnopenable
	}
	nonce := env[1 : 1+nonceSize]
	plain, err := s.aead.Open(nil, nonce, env[1+nonceSize:], ad)
	if err != nil {
		return opened{}, errUnopenable
	}
	var o opened
	o.sentAt = time.Unix(0, int64(binary.BigEndian.Uint64(plain)))
	copy(o.id[:], plain[8:])
	n := int(plain[8+idSize])
	rest := plain[8+idSize+1:]
	if n > len(rest) {
		return opened{}, errUnopenable // sealed by someone with the key but malformed: a bug
	}
	o.sender, o.body = string(rest[:n]), rest[n:]
	if age := now.Sub(o.sentAt); age > s.maxAge || age < -s.maxAge {
		return o, errStale
	}
	return o, nil
}

// seenSet remembers the IDs of messages taken for as long as they are fresh (maxAge),
// in two generations that take turns, so that memory is bounded by what arrives within
// twice maxAge and forgetting costs nothing per message.
type seenSet struct {
	mu       sync.Mutex
	maxAge   time.Duration
	cur, old map[[idSize]byte]struct{}
	turned   time.Time
}

func newSeenSet(maxAge time.Duration) *seenSet {
	return &seenSet{maxAge: maxAge, cur: map[[idSize]byte]struct{}{}, old: map[[idSize]byte]struct{}{}, turned: time.Now()}
}

// first records id and reports whether it was not seen before.
func (s *seenSet) first(id [idSize]byte, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.turned) > s.maxAge {
		s.old, s.cur, s.turned = s.cur, make(map[[idSize]byte]struct{}, len(s.cur)), now
	}
	if _, ok := s.cur[id]; ok {
		return false
	}
	if _, ok := s.old[id]; ok {
		return false
	}
	s.cur[id] = struct{}{}
	return true
}
