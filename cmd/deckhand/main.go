// Command deckhand runs durable background jobs on PostgreSQL fleets. See README.md.
package main

import (
	"context"
	"os"

	"github.com/deckhandhq/deckhand/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
