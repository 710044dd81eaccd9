//go:build faultinject

package engine

import (
	"os"
	"syscall"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// A test build of deckhand (go build -tags faultinject) can kill its own process at a chosen
// point, to show that nothing is lost or done twice whatever dies when. With
// DECKHAND_FAULT=kill-after-node-commit a worker dies right after a task's transaction
// committed on its node, before the result reaches the catalog. Production builds have no
// such hook.
func init() {
	if os.Getenv("DECKHAND_FAULT") == "kill-after-node-commit" {
		afterNodeCommit = func(*deckhandtype.ClaimedTask) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
			select {}
		}
	}
}
