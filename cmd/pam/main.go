// Command pam is the single binary of pam: orchestrator, worker, wrapper,
// hooks and operator CLI. Everything happens in package cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"pam/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a clean shutdown, a second one gets
	// the default behaviour and ends the process at once.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
