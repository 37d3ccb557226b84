package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/client"
)

// A guest asks the demo agent to ask a question, answers it, and prints the reply as it
// streams. (serverURL is a talkgraph server the package's tests start.)
func Example() {
	ctx := context.Background()
	c, err := client.New(ctx, serverURL, client.AsGuest())
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	key := uuid.NewString() // retrying with the same key stores one message
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/ask What is your name?", IdempotencyKey: &key})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev := ev.(type) {
		case *client.EventQuestionAsked:
			fmt.Println("agent asks:", ev.Question.Prompt)
			if _, err := c.RespondToQuestion(ctx, ev.Question.Id, "Ada"); err != nil {
				log.Fatal(err)
			}
		case *client.EventMessageChunk:
			fmt.Print(ev.Delta)
		case *client.EventMessageCompleted:
			if ev.Message.Role == client.RoleAssistant && ev.Message.Kind == client.MessageKindText {
				fmt.Println()
			}
		case *client.EventRunStatusChanged:
			if ev.Run.Id == sent.Run.Id && ev.Run.FinishedAt != nil {
				fmt.Println("run", ev.Run.Status)
				return
			}
		}
	}
	// Output:
	// agent asks: What is your name?
	// You answered "Ada". Thank you!
	// run COMPLETED
}
