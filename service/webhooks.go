package service

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// This file is a user's webhooks: the addresses their events are sent to when no client
// of theirs is connected. Creating, changing and deleting them are commands like any
// other, done where they are asked (they belong to no session). The deliveries are made
// by the writes that tell the events (telling.go) and attempted by the hook worker
// (hookworker.go).

// HookSender sends webhook deliveries over the network (package webhook implements it
// over HTTP, signed as Standard Webhooks says).
type HookSender interface {
	// CheckURL returns EINVALID, saying why, for a URL a webhook may not have: one that is
	// not http(s), or whose host is, or resolves to, an address the sender refuses.
	CheckURL(ctx context.Context, url string) error
	// Send makes one attempt of a delivery, and returns the receiver's HTTP status, or an
	// error when no answer came (refused, unreachable, no answer before ctx ended, an
	// address refused when it was reached).
	Send(ctx context.Context, r *HookRequest) (status int, err error)
}

// HookRequest is one attempt of a delivery.
type HookRequest struct {
	URL string
	// ID is the webhook-id (the event's id) and At the webhook-timestamp.
	ID   string
	At   time.Time
	Body []byte
	// Secrets are the whsec_ secrets to sign with, the current one first.
	Secrets []string
}

// Limits of a webhook's fields.
const (
	maxWebhookURL         = 2048
	maxWebhookDescription = 500
	// secretRotationOverlap is how long a rotated secret still signs beside the new one.
	secretRotationOverlap = 24 * time.Hour
)

// CreateWebhookArgs are createWebhook's arguments.
type CreateWebhookArgs struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description,omitempty"`
}

// UpdateWebhookArgs are updateWebhook's arguments; nil fields stay as they are.
type UpdateWebhookArgs struct {
	ID          string   `json:"id"`
	URL         *string  `json:"url,omitempty"`
	Events      []string `json:"events,omitempty"`
	Enabled     *bool    `json:"enabled,omitempty"`
	Description *string  `json:"description,omitempty"`
}

// WebhookIDArgs name a webhook (deleteWebhook, rotateWebhookSecret) or a delivery
// (redeliverWebhook).
type WebhookIDArgs struct {
	ID string `json:"id"`
}

// WebhookSecret is a webhook with its secret, as created or rotated: the only time the
// secret is shown.
type WebhookSecret struct {
	Webhook *Webhook
	Secret  string
}

func init() {
	addOperation("createWebhook", &operation{
		args:  func() any { return new(CreateWebhookArgs) },
		local: true,
		check: func(c *core, args any) error {
			a := args.(*CreateWebhookArgs)
			if err := checkWebhookURL(a.URL); err != nil {
				return err
			}
			if err := checkDescription(a.Description); err != nil {
				return err
			}
			var err error
			a.Events, err = checkEvents(a.Events)
			return err
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return outReply(s.createWebhook(ctx, cmd.UserID, cmd.Args.(*CreateWebhookArgs)))
		},
	})
	addOperation("updateWebhook", &operation{
		args:  func() any { return new(UpdateWebhookArgs) },
		local: true,
		check: func(c *core, args any) error {
			a := args.(*UpdateWebhookArgs)
			if err := checkID("webhook ID", a.ID); err != nil {
				return err
			}
			if a.URL != nil {
				if err := checkWebhookURL(*a.URL); err != nil {
					return err
				}
			}
			if a.Description != nil {
				if err := checkDescription(*a.Description); err != nil {
					return err
				}
			}
			if a.Events != nil {
				var err error
				if a.Events, err = checkEvents(a.Events); err != nil {
					return err
				}
			}
			return nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return outReply(s.updateWebhook(ctx, cmd.UserID, cmd.Args.(*UpdateWebhookArgs)))
		},
	})
	addOperation("deleteWebhook", &operation{
		args:  func() any { return new(WebhookIDArgs) },
		local: true,
		check: func(c *core, args any) error { return checkID("webhook ID", args.(*WebhookIDArgs).ID) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			id := cmd.Args.(*WebhookIDArgs).ID
			if _, err := s.ownWebhook(ctx, cmd.UserID, id); err != nil {
				return nil, err
			}
			return nil, s.store.DeleteWebhook(ctx, id)
		},
	})
	addOperation("rotateWebhookSecret", &operation{
		args:  func() any { return new(WebhookIDArgs) },
		local: true,
		check: func(c *core, args any) error { return checkID("webhook ID", args.(*WebhookIDArgs).ID) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return outReply(s.rotateSecret(ctx, cmd.UserID, cmd.Args.(*WebhookIDArgs).ID))
		},
	})
	addOperation("redeliverWebhook", &operation{
		args:  func() any { return new(WebhookIDArgs) },
		local: true,
		check: func(c *core, args any) error { return checkID("delivery ID", args.(*WebhookIDArgs).ID) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return outReply(s.redeliver(ctx, cmd.UserID, cmd.Args.(*WebhookIDArgs).ID))
		},
	})
}

// outReply is the reply of a local command whose caller reads its answer as it is.
func outReply[T any](v T, err error) (*Reply, error) {
	if err != nil {
		return nil, err
	}
	return &Reply{out: v}, nil
}

// CreateWebhook adds a webhook of the caller's, and returns it with its secret (shown
// only now). EINVALID for a URL that is not http(s) or whose host is or resolves to an
// address refused (loopback, private, link-local, unspecified), an empty list of events
// or an unknown one, a description over 500 characters, or a user who has
// MaxWebhooksPerUser webhooks; EUNAVAILABLE when the server sends no webhooks.
func (s *Service) CreateWebhook(ctx context.Context, rawURL string, events []string, description string) (*WebhookSecret, error) {
	r, err := s.exec(ctx, &Command{Op: "createWebhook", Args: &CreateWebhookArgs{URL: rawURL, Events: events, Description: description}})
	if err != nil {
		return nil, err
	}
	return r.out.(*WebhookSecret), nil
}

// UpdateWebhook changes a webhook of the caller's: nil fields stay as they are; enabling
// it clears why it was disabled. ENOTFOUND when missing or another user's; EINVALID as
// for CreateWebhook.
func (s *Service) UpdateWebhook(ctx context.Context, a UpdateWebhookArgs) (*Webhook, error) {
	r, err := s.exec(ctx, &Command{Op: "updateWebhook", Args: &a})
	if err != nil {
		return nil, err
	}
	return r.out.(*Webhook), nil
}

// DeleteWebhook deletes a webhook of the caller's and its deliveries. ENOTFOUND when
// missing or another user's.
func (s *Service) DeleteWebhook(ctx context.Context, id string) error {
	_, err := s.exec(ctx, &Command{Op: "deleteWebhook", Args: &WebhookIDArgs{ID: id}})
	return err
}

// RotateWebhookSecret gives a webhook of the caller's a new secret, returned (shown only
// now); the old one still signs beside it for 24 hours. ENOTFOUND when missing or another
// user's.
func (s *Service) RotateWebhookSecret(ctx context.Context, id string) (*WebhookSecret, error) {
	r, err := s.exec(ctx, &Command{Op: "rotateWebhookSecret", Args: &WebhookIDArgs{ID: id}})
	if err != nil {
		return nil, err
	}
	return r.out.(*WebhookSecret), nil
}

// RedeliverWebhook has a delivery of the caller's attempted once more, now, with the same
// webhook-id. ENOTFOUND when missing or another user's.
func (s *Service) RedeliverWebhook(ctx context.Context, deliveryID string) (*Delivery, error) {
	r, err := s.exec(ctx, &Command{Op: "redeliverWebhook", Args: &WebhookIDArgs{ID: deliveryID}})
	if err != nil {
		return nil, err
	}
	return r.out.(*Delivery), nil
}

// Webhooks returns the caller's webhooks, oldest first.
func (s *Service) Webhooks(ctx context.Context) ([]*Webhook, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	return s.store.Webhooks(ctx, u)
}

// WebhookDeliveries returns a page of a webhook's deliveries, newest first, after the
// cursor after (when not empty). EINVALID for a bad cursor or a negative first.
func (s *Service) WebhookDeliveries(ctx context.Context, w *Webhook, first *int, after string) (page []*Delivery, hasNext bool, err error) {
	n, err := s.pageSize(first)
	if err != nil {
		return nil, false, err
	}
	var pos *DeliveryPosition
	if after != "" {
		if pos, err = DecodeDeliveryCursor(after); err != nil {
			return nil, false, err
		}
	}
	page, err = s.store.Deliveries(ctx, w.ID, pos, n+1)
	if err != nil {
		return nil, false, err
	}
	if len(page) > n {
		page, hasNext = page[:n], true
	}
	return page, hasNext, nil
}

func (s *core) createWebhook(ctx context.Context, u string, a *CreateWebhookArgs) (*WebhookSecret, error) {
	if s.cfg.Hooks == nil {
		return nil, Errorf(EUNAVAILABLE, "this server sends no webhooks")
	}
	if err := s.cfg.Hooks.CheckURL(ctx, a.URL); err != nil {
		return nil, err
	}
	secret, raw := newWebhookSecret()
	w := &Webhook{ID: newID(), UserID: u, URL: a.URL, Events: a.Events, Enabled: true, Description: a.Description, CreatedAt: s.now()}
	w.Secret = s.seal.seal(w.ID, raw)
	if err := s.store.CreateWebhook(ctx, w, s.cfg.MaxWebhooksPerUser); err != nil {
		return nil, err
	}
	return &WebhookSecret{Webhook: w, Secret: secret}, nil
}

func (s *core) updateWebhook(ctx context.Context, u string, a *UpdateWebhookArgs) (*Webhook, error) {
	if _, err := s.ownWebhook(ctx, u, a.ID); err != nil {
		return nil, err
	}
	if a.URL != nil {
		if s.cfg.Hooks == nil {
			return nil, Errorf(EUNAVAILABLE, "this server sends no webhooks")
		}
		if err := s.cfg.Hooks.CheckURL(ctx, *a.URL); err != nil {
			return nil, err
		}
	}
	w, err := s.store.UpdateWebhook(ctx, a.ID, WebhookChange{URL: a.URL, Events: a.Events, Enabled: a.Enabled, Description: a.Description})
	if err == nil && a.Enabled != nil && *a.Enabled {
		s.hooks.poke() // what waited while it was disabled is due
	}
	return w, err
}

func (s *core) rotateSecret(ctx context.Context, u, id string) (*WebhookSecret, error) {
	if _, err := s.ownWebhook(ctx, u, id); err != nil {
		return nil, err
	}
	secret, raw := newWebhookSecret()
	w, err := s.store.UpdateWebhook(ctx, id, WebhookChange{Secret: s.seal.seal(id, raw), PreviousUntil: s.now().Add(secretRotationOverlap)})
	if err != nil {
		return nil, err
	}
	return &WebhookSecret{Webhook: w, Secret: secret}, nil
}

func (s *core) redeliver(ctx context.Context, u, id string) (*Delivery, error) {
	d, err := s.store.Delivery(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && d.UserID != u) {
		return nil, Errorf(ENOTFOUND, "delivery not found")
	} else if err != nil {
		return nil, err
	}
	if d, err = s.store.Redeliver(ctx, id, s.now()); err != nil {
		return nil, err
	}
	s.hooks.poke()
	return d, nil
}

// ownWebhook returns webhook id when it is user u's; ENOTFOUND when missing or another
// user's.
func (s *core) ownWebhook(ctx context.Context, u, id string) (*Webhook, error) {
	w, err := s.store.Webhook(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && w.UserID != u) {
		return nil, Errorf(ENOTFOUND, "webhook not found")
	}
	return w, err
}

// newWebhookSecret returns a new secret as shown ("whsec_" and base64 of 32 random
// bytes) and its bytes.
func newWebhookSecret() (shown string, raw []byte) {
	raw = make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err) // crypto/rand never fails on the platforms Go supports
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(raw), raw
}

// checkWebhookURL refuses, on its face, a URL that is not an absolute http(s) one.
func checkWebhookURL(raw string) error {
	if len(raw) > maxWebhookURL {
		return Errorf(EINVALID, "the URL is too long: at most %d bytes", maxWebhookURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return Errorf(EINVALID, "the URL must be an http or https URL with a host (and no user or password)")
	}
	return nil
}

// checkEvents returns events without duplicates, in the order given; EINVALID for an
// empty list or a type that is not one of HookTypes.
func checkEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, Errorf(EINVALID, "name at least one event type")
	}
	var out []string
	for _, e := range events {
		if !knownHookType(e) {
			return nil, Errorf(EINVALID, "unknown event type %q: the types are %s", truncate(e, 40), strings.Join(HookTypes(), ", "))
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func checkDescription(d string) error {
	if !utf8.ValidString(d) || utf8.RuneCountInString(d) > maxWebhookDescription {
		return Errorf(EINVALID, "the description must be valid UTF-8 of at most %d characters", maxWebhookDescription)
	}
	return nil
}

// EncodeDeliveryCursor returns the cursor of d in its webhook's list of deliveries.
func EncodeDeliveryCursor(d *Delivery) string {
	raw := "d:" + strconv.FormatInt(d.CreatedAt.UnixNano(), 10) + ":" + d.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeDeliveryCursor parses a cursor of a list of deliveries; EINVALID when malformed.
func DecodeDeliveryCursor(s string) (*DeliveryPosition, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.SplitN(string(raw), ":", 3)
	if err != nil || len(parts) != 3 || parts[0] != "d" {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, Errorf(EINVALID, "invalid cursor")
	}
	return &DeliveryPosition{CreatedAt: unixNano(ns), ID: parts[2]}, nil
}
