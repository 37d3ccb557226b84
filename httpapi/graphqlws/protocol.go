package graphqlws

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// Close codes: the websocket standard's and graphql-transport-ws's own (44xx), which the
// legacy protocol's connections are closed with too.
const (
	CloseGoingAway      = websocket.CloseGoingAway     // 1001: shutdown, dead or stuck connection
	CloseTooBig         = websocket.CloseMessageTooBig // 1009
	CloseTryAgainLater  = websocket.CloseTryAgainLater // 1013: the user holds too many sockets
	CloseBadRequest     = 4400                         // a message the protocol does not allow
	CloseUnauthorized   = 4401                         // no or bad token, or it expired
	CloseInitTimeout    = 4408                         // no connection_init in time
	CloseSubscriberUsed = 4409                         // a subscription ID already in use
	CloseTooManyInits   = 4429                         // a second connection_init
	closeNormal         = websocket.CloseNormalClosure // 1000: the client said goodbye
)

// protocol names the message types of one subprotocol.
type protocol struct {
	name                       string
	next, start, stop, keepNow string
	legacy                     bool
}

var (
	transportWS = protocol{name: "graphql-transport-ws", next: "next", start: "subscribe", stop: "complete", keepNow: "ping"}
	legacyWS    = protocol{name: "graphql-ws", next: "data", start: "start", stop: "stop", keepNow: "ka", legacy: true}
)

// message is a message of either protocol.
type message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
