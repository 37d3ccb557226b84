package app

import (
	"fmt"
	"strconv"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
	"github.com/talkgraph/talkgraph/service/openai"
)

// buildAgents registers the agents this server offers: demo always; openai when an
// endpoint or an API key is configured.
func buildAgents(c Config) (*service.Agents, error) {
	agents := &service.Agents{}
	agents.Register("demo", demo.Description, &demo.Agent{ChunkDelay: c.DemoChunkDelay})
	if c.Agents != nil {
		defer c.Agents(agents)
	}
	o := c.OpenAI
	if o.BaseURL == "" && o.APIKey == "" {
		return agents, nil
	}
	cfg := openai.Config{BaseURL: o.BaseURL, APIKey: o.APIKey, Model: o.Model, SystemPrompt: o.SystemPrompt,
		Tools: o.Tools, EnableShell: o.Shell, Shell: openai.ShellConfig{Dir: o.ShellDir, Timeout: o.ShellTimeout}}
	if o.Temperature != "" {
		t, err := strconv.ParseFloat(o.Temperature, 64)
		if err != nil || t < 0 || t > 2 {
			return nil, fmt.Errorf("OPENAI_TEMPERATURE: want a number from 0 to 2, got %q", o.Temperature)
		}
		cfg.Temperature = &t
	}
	agent, err := openai.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("openai agent: %w", err)
	}
	desc := "Chat model " + cfg.Model + " through an OpenAI-compatible API; it can ask you questions"
	if cfg.EnableShell {
		desc += " and run shell commands"
	}
	agents.Register("openai", desc, agent)
	return agents, nil
}
