package openai

// NewShellTool is the shell tool on its own, for the test that runs it in a process it
// then kills.
func NewShellTool(cfg ShellConfig) Tool { return newShellTool(cfg) }
