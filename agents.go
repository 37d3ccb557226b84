package main

import (
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
)

// buildAgents registers the agents this server offers: demo always, openai when an
// endpoint or key is configured.
func buildAgents(c Config) (*service.Agents, error) {
	agents := &service.Agents{}
	agents.Register("demo", demo.Description, &demo.Agent{ChunkDelay: c.DemoChunkDelay})
	return agents, nil
}
