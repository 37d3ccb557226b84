package app

import (
	"context"
	"fmt"
	"strconv"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
	"github.com/talkgraph/talkgraph/service/mcp"
	"github.com/talkgraph/talkgraph/service/openai"
)

// buildAgents registers the agents this server offers: demo always; openai when an
// endpoint or an API key is configured, with the tools of the MCP servers of tools (nil:
// none).
func buildAgents(c Config, tools *mcp.Manager) (*service.Agents, error) {
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
	if tools != nil {
		cfg.ToolSets = []openai.ToolSet{mcpTools{tools}}
	}
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
	if tools != nil {
		desc += "; it uses the tools of MCP servers"
	}
	agents.Register("openai", desc, agent)
	return agents, nil
}

// mcpTools offers the openai agent the tools of the MCP servers that are up.
type mcpTools struct{ m *mcp.Manager }

func (s mcpTools) Tools() []openai.Tool {
	ts := s.m.Tools()
	out := make([]openai.Tool, len(ts))
	for i, t := range ts {
		out[i] = mcpTool{t}
	}
	return out
}

// mcpTool is an MCP tool as an openai.Tool, with its default policy
// (openai.PolicyDefaulter).
type mcpTool struct{ *mcp.Tool }

func (t mcpTool) Call(ctx context.Context, arguments string, out openai.ToolOutput) (string, error) {
	return t.Tool.Call(ctx, arguments, out)
}
