package service

import (
	"context"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// sealer seals the webhook secrets the store keeps: XChaCha20-Poly1305, bound to the
// webhook each belongs to, under a key derived from Config.WebhookSealKey
// (WEBHOOK_SECRET_KEY) when the operator gives one, so that a reader of the database
// cannot sign as the server; otherwise from a secret the store keeps apart (SecretKeeper:
// a row of its own, made once and shared by replicas), which keeps the secrets out of the
// webhooks' rows but not from a reader of the whole database. A store that keeps no
// secrets (memory) gets a key of the process's own, which dies with what it protects.
type sealer struct{ aead cipher.AEAD }

// sealSecretName is the name under which the store keeps the secret the key is derived
// from.
const sealSecretName = "webhook-seal"

func newSealer(ctx context.Context, store Store, given string) (*sealer, error) {
	gen := func() ([]byte, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return b, err
	}
	var secret []byte
	var err error
	if given != "" {
		secret = []byte(given)
	} else if k, ok := store.(SecretKeeper); ok {
		secret, err = k.Secret(ctx, sealSecretName, gen)
	} else {
		secret, err = gen()
	}
	if err != nil {
		return nil, fmt.Errorf("the key that seals webhook secrets: %w", err)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "talkgraph webhook secrets v1", chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns secret sealed for webhook id: the nonce, then the sealed secret.
func (s *sealer) seal(id string, secret []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(secret)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand never fails on the platforms Go supports
	}
	return s.aead.Seal(nonce, nonce, secret, []byte(id))
}

// open returns the secret sealed for webhook id; an error when it does not open (another
// server's, or tampered with).
func (s *sealer) open(id string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("a sealed webhook secret is too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
}
