// Command client talks to a talkgraph server from Go, with package client: it signs in as
// a guest, creates a session, sends a message, prints the reply as it streams and asks
// you whatever the agent asks.
//
//	go run ./examples/client -server http://localhost:8080 '/ask What is your name?'
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/client"
)

func main() {
	server := flag.String("server", "http://localhost:8080", "the talkgraph server")
	flag.Parse()
	message := strings.Join(flag.Args(), " ")
	if message == "" {
		message = "/ask What is your name?"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := talk(ctx, *server, message, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// talk sends message in a new session and prints what the agent does until its run ends,
// answering its questions with lines read from in.
func talk(ctx context.Context, server, message string, in io.Reader, out io.Writer) error {
	c, err := client.New(ctx, server, client.AsGuest())
	if err != nil {
		return err
	}
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		return err
	}
	key := uuid.NewString() // a retry with the same key would store the message once
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: message, IdempotencyKey: &key})
	if err != nil {
		return err
	}
	answers := bufio.NewScanner(in)
	// Follow resumes by itself if the connection drops: every event comes once, in order.
	for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
		if err != nil {
			return err
		}
		switch ev := ev.(type) {
		case *client.EventMessageChunk:
			fmt.Fprint(out, ev.Delta)
		case *client.EventMessageCompleted:
			if ev.Message.Role == client.RoleAssistant && ev.Message.Kind == client.MessageKindText {
				fmt.Fprintln(out)
			}
		case *client.EventQuestionAsked:
			fmt.Fprintf(out, "%s\n> ", ev.Question.Prompt)
			if !answers.Scan() {
				return errors.New("no answer to the question")
			}
			if _, err := c.RespondToQuestion(ctx, ev.Question.Id, answers.Text()); err != nil {
				return err
			}
		case *client.EventRunStatusChanged:
			if ev.Run.Id == sent.Run.Id && ev.Run.FinishedAt != nil {
				if ev.Run.Error != nil {
					return fmt.Errorf("the run ended %s: %s", ev.Run.Status, *ev.Run.Error)
				}
				return nil
			}
		}
	}
	return nil
}
