//go:build faultinject

package move

import (
	"os"
	"strings"
	"syscall"
)

// A test build of deckhand (go build -tags faultinject) can kill its own process right after
// a step of a move: DECKHAND_FAULT=kill-after-move-step:copy. Production builds have no such hook.
func init() {
	if step, ok := strings.CutPrefix(os.Getenv("DECKHAND_FAULT"), "kill-after-move-step:"); ok {
		afterStep = func(s string) {
			if s == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
				select {}
			}
		}
	}
}
