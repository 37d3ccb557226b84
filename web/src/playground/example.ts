/** The first tab's operations on a first visit: the whole round trip with the demo agent. */
export const EXAMPLE_QUERY = `# Welcome to the talkgraph playground.
#
# Sign in above first (a guest will do). Then run these in order: put the cursor in an
# operation and press Ctrl+Enter, or pick it from the run button's menu.
#
# 1. Create a chat. Copy its id and streamCursor into the variables below.
mutation CreateSession {
  createTalkSession(input: { title: "From the playground" }) {
    id
    title
    streamCursor
  }
}

# 2. Send a message; the demo agent starts replying at once.
#    (It also knows /ask <question>, /slow <n>, /tool <text> and /fail.)
mutation SendMessage($sessionId: ID!) {
  addMessage(input: { sessionId: $sessionId, content: "Hello from the playground" }) {
    message { id role content }
    run { id status }
  }
}

# 3. Follow the chat. With after: the streamCursor from step 1 you get every event since
#    then (the reply you just asked for), then live ones; without it, live ones only.
#    Pick WebSocket or Server-sent events above. The run button stops it.
subscription FollowSession($sessionId: ID!, $after: String) {
  messageStream(sessionId: $sessionId, after: $after) {
    __typename
    cursor
    at
    ... on MessageAdded { message { id role status } }
    ... on MessageChunk { messageId offset delta }
    ... on MessageCompleted { message { id role status content error } }
    ... on RunStatusChanged { run { id status error } }
  }
}

# 4. Read it back.
query History($sessionId: ID!) {
  session(id: $sessionId) {
    title
    status
    messages(last: 20) {
      edges { node { role content status error } }
    }
  }
}
`;

export const EXAMPLE_VARIABLES = `{
  "sessionId": "paste the id from step 1",
  "after": null
}
`;
