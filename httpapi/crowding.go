package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// crowdWait is the Retry-After of a refusal by a cap on what is open at once: a slot
// comes back when a socket or subscription closes, which no clock tells.
const crowdWait = 5 * time.Second

// crowding caps what one user and one client address hold open at once: websockets (and
// server-sent events subscriptions, each of which holds a connection of its own) and
// subscriptions, so that one address cannot take every subscription the server has
// (MAX_SUBSCRIPTIONS) nor hold thousands of connections. Per address the caps are higher
// than per user: several users behind one office NAT share an address.
type crowding struct {
	addrs         clientAddresses
	socketsByAddr *slots
	socketsByUser *slots
	subsByAddr    *slots
	subsByUser    *slots
}

func newCrowding(addrs clientAddresses, cfg HandlerConfig) *crowding {
	return &crowding{
		addrs:         addrs,
		socketsByAddr: newSlots(cfg.SocketsPerAddress),
		socketsByUser: newSlots(cfg.SocketsPerUser),
		subsByAddr:    newSlots(cfg.SubscriptionsPerAddress),
		subsByUser:    newSlots(cfg.SubscriptionsPerUser),
	}
}

// clientAddrKey is the context key of a websocket's client address (see wsValues), which
// its subscriptions count against.
type clientAddrKey struct{}

// admitUpgrade takes a socket of the request's address before the upgrade costs anything,
// and refuses it with 429 when the address holds its cap, or when the upgrade's
// Authorization header names a user who does (the user's slot is taken at
// connection_init, see admitUser, which decides whose socket it is).
func (c *crowding) admitUpgrade(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	addr := c.addrs.of(r)
	if id, ok := r.Context().Value(identityKey{}).(jwtauth.Identity); ok && c.socketsByUser.full(id.UserID) {
		tooMany(w, r, crowdWait, c.tooManySocketsForUser())
		return nil, false
	}
	if !c.socketsByAddr.take(addr) {
		tooMany(w, r, crowdWait, c.tooManySocketsFromAddress())
		return nil, false
	}
	return func() { c.socketsByAddr.release(addr) }, true
}

// admitUser takes a socket of the user connection_init authorised, if any.
func (c *crowding) admitUser(ctx context.Context) (release func(), err error) {
	user := service.UserFrom(ctx)
	if user == "" {
		return func() {}, nil // a reader without a sign-in: the socket counts against its address
	}
	if !c.socketsByUser.take(user) {
		return nil, service.Errorf(service.ERATELIMIT, "%s", c.tooManySocketsForUser())
	}
	return func() { c.socketsByUser.release(user) }, nil
}

// admitSubscription takes a subscription of the user and of the address of a websocket's
// operation context.
func (c *crowding) admitSubscription(ctx context.Context) (release func(), err error) {
	addr, _ := ctx.Value(clientAddrKey{}).(string)
	return c.admitSub(service.UserFrom(ctx), addr)
}

// admitStream takes, for a subscription over server-sent events, a socket and a
// subscription of its user (if any) and of its address: the stream holds its connection
// as a websocket would.
func (c *crowding) admitStream(ctx context.Context, r *http.Request) (release func(), err error) {
	user, addr := service.UserFrom(ctx), c.addrs.of(r)
	if user != "" && !c.socketsByUser.take(user) {
		return nil, service.Errorf(service.ERATELIMIT, "%s", c.tooManySocketsForUser())
	}
	if !c.socketsByAddr.take(addr) {
		if user != "" {
			c.socketsByUser.release(user)
		}
		return nil, service.Errorf(service.ERATELIMIT, "%s", c.tooManySocketsFromAddress())
	}
	sub, err := c.admitSub(user, addr)
	if err != nil {
		c.socketsByAddr.release(addr)
		if user != "" {
			c.socketsByUser.release(user)
		}
		return nil, err
	}
	return func() {
		sub()
		c.socketsByAddr.release(addr)
		if user != "" {
			c.socketsByUser.release(user)
		}
	}, nil
}

// admitSub takes a subscription of user (none when empty: the resolver refuses the
// subscription of nobody) and of addr.
func (c *crowding) admitSub(user, addr string) (release func(), err error) {
	if user != "" && !c.subsByUser.take(user) {
		return nil, service.Errorf(service.ERATELIMIT, "too many subscriptions open for this user (at most %d); stop some first", c.subsByUser.max)
	}
	if !c.subsByAddr.take(addr) {
		if user != "" {
			c.subsByUser.release(user)
		}
		return nil, service.Errorf(service.ERATELIMIT, "too many subscriptions open from your address (at most %d); stop some first", c.subsByAddr.max)
	}
	return func() {
		c.subsByAddr.release(addr)
		if user != "" {
			c.subsByUser.release(user)
		}
	}, nil
}

func (c *crowding) tooManySocketsForUser() string {
	return fmt.Sprintf("too many websockets and event streams open for this user (at most %d)", c.socketsByUser.max)
}

func (c *crowding) tooManySocketsFromAddress() string {
	return fmt.Sprintf("too many websockets and event streams open from your address (at most %d)", c.socketsByAddr.max)
}
