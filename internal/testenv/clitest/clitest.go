// Package clitest runs the deckhand command line in-process, the way an operator runs it. It
// is a package of its own, apart from testenv, because the command line links packages whose
// in-package tests use testenv.
package clitest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// Deckhand runs `deckhand --catalog catalogDSN args...` with nothing on standard input and
// returns its exit code and output. A command still running after a minute is cancelled.
func Deckhand(t testing.TB, catalogDSN string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	code = cli.Main(ctx, append([]string{"--catalog", catalogDSN}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// Run runs a command as Deckhand does and fails the test unless it exits 0. It returns what
// the command printed on standard output.
func Run(t testing.TB, catalogDSN string, args ...string) string {
	t.Helper()
	code, out, errOut := Deckhand(t, catalogDSN, args...)
	if code != 0 {
		t.Fatalf("deckhand %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}
