package cli_test

import (
	"strings"
	"testing"
)

// cobra's own commands, help and completion, follow the contract of deckhand's: an unknown
// topic or shell is bad usage (exit 2, one line), not help printed with exit 0 (which a
// script takes for success) or exit 1 (an operation that failed).
func TestHelpAndCompletionRefuseUnknownArguments(t *testing.T) {
	t.Parallel()
	wantUsage(t, deckhand(t, "", "help", "bogus"), `unknown help topic "bogus"`)
	wantUsage(t, deckhand(t, "", "help", "job", "lst"), `unknown help topic "job lst"`)
	wantUsage(t, deckhand(t, "", "completion", "tcsh"), `unknown command "tcsh" for "deckhand completion"`)
	wantUsage(t, deckhand(t, "", "completion", "fish", "extra"), `"extra"`, "deckhand completion fish")

	r := deckhand(t, "", "help", "job", "wait")
	if want(t, r, 0); !strings.Contains(r.stdout, "deckhand job wait ID") {
		t.Errorf("help job wait:\n%s", r.stdout)
	}
	r = deckhand(t, "", "completion", "bash")
	if want(t, r, 0); !strings.HasPrefix(r.stdout, "# bash completion") {
		t.Errorf("completion bash: %.80q", r.stdout)
	}
	if r = deckhand(t, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("help: %s", r)
	}
}
