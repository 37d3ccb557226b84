package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"time"
	"unicode/utf8"
)

// Sharing a conversation.
//
// A share link is a capability: whoever holds its token reads one branch of a session,
// without signing in. The token is 256 random bits (crypto/rand), shown once, when the
// link is made; the store keeps only its SHA-256 (ShareLink.Hash), by which a read finds
// the link, and compares the two in constant time. A token tells nothing of the session
// or its owner, and an unknown, malformed, revoked or expired token reads as nothing,
// alike (see SharedSession).
//
// A snapshot link shows the current branch as it was when the link was made: the branch
// up to its leaf then, the message then being written cut to the text it had, the calls
// then running or waiting as they were then (ShareSnapshot). A live link follows the
// current branch as it goes, its stream included (SubscribeShared). Neither shows what
// the session waits on, nor anything of its owner: what a reader gets goes through one
// filter (shareMask, in shared.go).
//
// Making and revoking a link are commands of the session (createShareLink,
// revokeShareLink), each one write of its log: the link's row goes with an event that
// tells of it (ShareLinkCreated, ShareLinkRevoked, Key the link's ID), which no client's
// messageStream shows. A live stream reads that event in the session's log, on whichever
// replica serves it, and ends there: revocation needs no message of its own. Expiry is
// a time every replica can read, and deleting the session ends its log.

// ShareLink is a link that lets anyone with its token read one branch of a session.
type ShareLink struct {
	ID        string
	SessionID string
	// Hash is the SHA-256 of the token; the token itself is never kept.
	Hash []byte
	// Live links follow the branch; others show it as it was (Snapshot).
	Live bool
	// IncludeTools shows tool calls' arguments, output and results; without it a reader
	// sees their names and statuses only.
	IncludeTools bool
	ExpiresAt    *time.Time
	RevokedAt    *time.Time
	CreatedAt    time.Time
	// Views counts the link's reads and stream starts; stores keep it apart from the rest
	// of the row (Store.CountShareView).
	Views int64
	// Snapshot is what a snapshot link shows; nil for a live link.
	Snapshot *ShareSnapshot
}

// ShareSnapshot is the branch a snapshot link shows: the path up from Leaf, as it stood
// at Seq. The messages on that path were all begun by then; what changed on them since
// is what was still being written then, which Text and Tools freeze.
type ShareSnapshot struct {
	// Seq is the end of the session's log when the link was made.
	Seq int64 `json:"seq"`
	// Leaf is the current branch's last message then ("" for an empty branch).
	Leaf string `json:"leaf,omitempty"`
	// Text is the message then being written, with the length of its text then.
	Text *FrozenText `json:"text,omitempty"`
	// Run is the run then active, whose calls Tools lists: a call of that run not listed
	// began later and is not shown.
	Run   string       `json:"run,omitempty"`
	Tools []FrozenTool `json:"tools,omitempty"`
}

// FrozenText is a message as a snapshot shows it: the first Runes code points of its text,
// still STREAMING.
type FrozenText struct {
	ID    string `json:"id"`
	Runes int    `json:"runes"`
}

// FrozenTool is a tool call as a snapshot shows it: its status then and, unless that was
// final, the first Runes code points of its output.
type FrozenTool struct {
	ID     string         `json:"id"`
	Status ToolCallStatus `json:"status"`
	Runes  int            `json:"runes"`
}

// Active reports whether the link opens its session at now: not revoked, not expired.
func (l *ShareLink) Active(now time.Time) bool {
	return l.RevokedAt == nil && (l.ExpiresAt == nil || now.Before(*l.ExpiresAt))
}

// The events that tell of a link (Key: its ID). No client's stream shows them.
const (
	EventShareLinkCreated EventType = "ShareLinkCreated"
	EventShareLinkRevoked EventType = "ShareLinkRevoked"
)

// newShareToken returns a new token and its hash.
func newShareToken() (token string, hash []byte, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, Errorf(EINTERNAL, "no randomness for a share token: %v", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, shareHash(token), nil
}

// shareHash is the hash a link keeps of token.
func shareHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// maxShareToken is the longest token the service hashes; a longer one is hashed cut
// short, and finds nothing all the same (tokens are 43 characters).
const maxShareToken = 256

// CreateShareLinkInput says what a new link shows.
type CreateShareLinkInput struct {
	SessionID    string     `json:"sessionId"`
	Live         bool       `json:"live,omitempty"`
	IncludeTools bool       `json:"includeTools,omitempty"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
}

// shareLinkArgs are createShareLink's arguments: the input, and the token made for it
// where the command was asked (so that a command done on another replica returns the
// token the caller's replica will show; only its hash is written).
type shareLinkArgs struct {
	CreateShareLinkInput
	Token string `json:"token"`
}

// IDArgs are the arguments of an operation on one thing named by its ID.
type IDArgs struct {
	ID string `json:"id"`
}

// CreateShareLink makes a link to the caller's session, and returns it with its token,
// which is never shown again. EINVALID for an ExpiresAt not in the future; ENOTFOUND for
// a session that is missing or not the caller's; ERATELIMIT when the session has
// MaxShareLinks links that are neither revoked nor expired.
func (s *Service) CreateShareLink(ctx context.Context, in CreateShareLinkInput) (*ShareLink, string, error) {
	token, _, err := newShareToken()
	if err != nil {
		return nil, "", err
	}
	r, err := s.exec(ctx, &Command{Op: "createShareLink", SessionID: in.SessionID, Args: &shareLinkArgs{CreateShareLinkInput: in, Token: token}})
	if err != nil {
		return nil, "", err
	}
	return r.ShareLink, token, nil
}

// RevokeShareLink revokes one of the caller's links at once: reads of it find nothing,
// and its live streams end. Revoking a revoked link answers it as it is. ENOTFOUND for a
// link that is missing, or whose session is missing or not the caller's.
func (s *Service) RevokeShareLink(ctx context.Context, id string) (*ShareLink, error) {
	r, err := s.exec(ctx, &Command{Op: "revokeShareLink", Args: &IDArgs{ID: id}})
	if err != nil {
		return nil, err
	}
	return r.ShareLink, nil
}

// ShareLinks returns the links of the caller's session, oldest first, revoked and expired
// ones included. ENOTFOUND for a session that is missing or not the caller's.
func (s *Service) ShareLinks(ctx context.Context, sessionID string) ([]*ShareLink, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return nil, err
	}
	return s.store.ShareLinks(ctx, sessionID)
}

func init() {
	addOperation("createShareLink", &operation{
		args: func() any { return new(shareLinkArgs) },
		check: func(c *core, args any) error {
			a := args.(*shareLinkArgs)
			if a.ExpiresAt != nil && !a.ExpiresAt.After(c.now()) {
				return Errorf(EINVALID, "expiresAt must be in the future")
			}
			if len(a.Token) != 43 {
				return Errorf(EINVALID, "malformed share token")
			}
			return nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			l, err := s.createShareLink(ctx, cmd.SessionID, cmd.Args.(*shareLinkArgs))
			if err != nil {
				return nil, err
			}
			return &Reply{ShareLink: l}, nil
		},
	})
	addOperation("revokeShareLink", &operation{
		args: func() any { return new(IDArgs) },
		locate: func(ctx context.Context, c *core, u string, args any) (string, error) {
			l, err := c.ownShareLink(ctx, u, args.(*IDArgs).ID)
			if err != nil {
				return "", err
			}
			return l.SessionID, nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			l, err := s.revokeShareLink(ctx, cmd.SessionID, cmd.Args.(*IDArgs).ID)
			if err != nil {
				return nil, err
			}
			return &Reply{ShareLink: l}, nil
		},
	})
	addOperation("forkSharedSession", &operation{
		args:  func() any { return new(ForkSharedArgs) },
		local: true,
		check: func(c *core, args any) error {
			a := args.(*ForkSharedArgs)
			a.Title = trimTitle(a.Title)
			return c.checkTitle(a.Title)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*ForkSharedArgs)
			return viewReply(s.forkShared(ctx, cmd.UserID, cmd.Guest, a.Token, a.Title))
		},
	})
}

// ForkSharedArgs are forkSharedSession's arguments.
type ForkSharedArgs struct {
	Token string `json:"token"`
	Title string `json:"title,omitempty"`
}

// ForkSharedSession makes a new session of the caller's holding what the link token
// shows, as forkSession copies a branch: new messages with their text and status, the
// session's settings the server's defaults (none of the owner's), its title the shared
// one unless title is given. ENOTFOUND (ErrNoShare) for a token that opens nothing;
// EINVALID for a bad title; ERATELIMIT as createTalkSession.
func (s *Service) ForkSharedSession(ctx context.Context, token, title string) (*SessionView, error) {
	r, err := s.exec(ctx, &Command{Op: "forkSharedSession", Args: &ForkSharedArgs{Token: token, Title: title}})
	if err != nil {
		return nil, err
	}
	return r.view, nil
}

// forkShared is ForkSharedSession, for user u (a guest when guest).
func (s *core) forkShared(ctx context.Context, u string, guest bool, token, title string) (*SessionView, error) {
	l, err := s.findShareLink(ctx, token)
	if err != nil {
		return nil, err
	}
	v, err := s.sharedView(ctx, l)
	if err != nil {
		return nil, err
	}
	if title == "" {
		title = v.Title
	}
	msgs := make([]*Message, len(v.Messages))
	for i, h := range v.Messages {
		msgs[i] = &h.Message
	}
	return s.copySession(ctx, u, title, Settings{Agent: "demo", BusyPolicy: BusyInterrupt, Guest: guest}, msgs)
}

// ownShareLink returns link id when its session is user u's; ENOTFOUND otherwise.
func (s *core) ownShareLink(ctx context.Context, u, id string) (*ShareLink, error) {
	if err := checkID("share link ID", id); err != nil {
		return nil, err
	}
	l, err := s.store.ShareLinkByID(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(ENOTFOUND, "share link not found")
	} else if err != nil {
		return nil, err
	}
	if _, err := s.ownSession(ctx, u, l.SessionID); ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(ENOTFOUND, "share link not found")
	} else if err != nil {
		return nil, err
	}
	return l, nil
}

// createShareLink writes a new link of session id, under its lock: a snapshot link
// records the branch as the session's log and its run stand, so that it shows what was
// durable then and nothing after.
func (s *core) createShareLink(ctx context.Context, id string, a *shareLinkArgs) (*ShareLink, error) {
	_, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	links, err := s.store.ShareLinks(ctx, id)
	if err != nil {
		return nil, err
	}
	now := s.now()
	open := 0
	for _, l := range links {
		if l.Active(now) {
			open++
		}
	}
	if open >= s.cfg.MaxShareLinks {
		return nil, Errorf(ERATELIMIT, "this session has %d share links open, the most it can have: revoke some first", open)
	}
	l := &ShareLink{ID: newID(), SessionID: id, Hash: shareHash(a.Token), Live: a.Live, IncludeTools: a.IncludeTools, CreatedAt: now}
	if a.ExpiresAt != nil {
		exp := a.ExpiresAt.UTC()
		l.ExpiresAt = &exp
	}
	if !l.Live {
		l.Snapshot = st.snapshotLocked()
	}
	t := st.beginLocked()
	t.add(&Event{Type: EventShareLinkCreated, Key: l.ID})
	t.b.ShareLink = l
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// snapshotLocked records the current branch as it stands: its leaf, the message being
// written and the text of it that is durable, and the active run's calls as they are.
func (st *sessionState) snapshotLocked() *ShareSnapshot {
	snap := &ShareSnapshot{Seq: st.log.end.Seq, Leaf: st.log.leaf}
	ar := st.active
	if ar == nil {
		return snap
	}
	if ar.msg != nil && ar.announced {
		snap.Text = &FrozenText{ID: ar.msg.ID, Runes: utf8.RuneCountInString(ar.text.written.String())}
	}
	snap.Run = ar.run.ID
	for id, tool := range ar.tools {
		snap.Tools = append(snap.Tools, FrozenTool{ID: id, Status: tool.call.Status, Runes: utf8.RuneCountInString(tool.out.written.String())})
	}
	return snap
}

// revokeShareLink revokes link lid of session id.
func (s *core) revokeShareLink(ctx context.Context, id, lid string) (*ShareLink, error) {
	_, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, err := s.store.ShareLinkByID(ctx, lid)
	if ErrorCode(err) == ENOTFOUND || (err == nil && l.SessionID != id) {
		return nil, Errorf(ENOTFOUND, "share link not found")
	} else if err != nil {
		return nil, err
	}
	if l.RevokedAt != nil {
		return l, nil
	}
	now := s.now()
	l.RevokedAt = &now
	t := st.beginLocked()
	t.add(&Event{Type: EventShareLinkRevoked, Key: l.ID})
	t.b.ShareLink = l
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// findShareLink returns the link token opens, whatever the token: unknown, malformed,
// revoked and expired tokens alike answer ENOTFOUND, after the same work (a hash and one
// lookup), so that neither the answer nor its time tells them apart.
func (s *core) findShareLink(ctx context.Context, token string) (*ShareLink, error) {
	if len(token) > maxShareToken {
		token = token[:maxShareToken]
	}
	hash := shareHash(token)
	l, err := s.store.ShareLink(ctx, hash)
	if err != nil && ErrorCode(err) != ENOTFOUND {
		return nil, err
	}
	if err != nil || subtle.ConstantTimeCompare(l.Hash, hash) != 1 || !l.Active(s.now()) {
		return nil, errNoShare
	}
	return l, nil
}

// errNoShare is what a reader gets for a token that opens nothing, or no longer does.
var errNoShare = Errorf(ENOTFOUND, "shared conversation not found")
