//go:build !unix

package openai

import (
	"context"
	"errors"
)

// runShell needs process groups, which only Unix has here.
func runShell(context.Context, ShellConfig, string, ToolOutput) (string, error) {
	return "", errors.New("the shell tool is not available on this operating system")
}
