package procstat_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/procstat"
)

// A process that spins shows the CPU it used in its own counters, then in its parent's
// children's once it exits and is waited for.
func TestOfCountsAProcessAndItsWaitedChildren(t *testing.T) {
	self, ok := procstat.Of(os.Getpid())
	if !ok || self.Parent != os.Getppid() {
		t.Fatalf("this process: %+v, %v; want its parent %d", self, ok, os.Getppid())
	}
	spin := exec.Command("sh", "-c", `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done`)
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	// Read it while it runs: its name and parent are known at once, its CPU once it spun.
	if s, ok := procstat.Of(spin.Process.Pid); !ok || s.Command != "sh" || s.Parent != os.Getpid() {
		t.Errorf("the spinning child: %+v, %v; want sh, child of %d", s, ok, os.Getpid())
	}
	if err := spin.Wait(); err != nil {
		t.Fatal(err)
	}
	used := spin.ProcessState.UserTime() + spin.ProcessState.SystemTime()
	if used < 50*time.Millisecond {
		t.Fatalf("the child used only %v of CPU: too little to compare with 10 ms ticks", used)
	}
	after, ok := procstat.Of(os.Getpid())
	if !ok {
		t.Fatal("this process is gone from /proc")
	}
	// The kernel's tick counters and the wait's precise times agree within a few ticks.
	if got := after.Children - self.Children; got < used-30*time.Millisecond || got > used+30*time.Millisecond {
		t.Errorf("children's CPU rose by %v; the child used %v", got, used)
	}
	if _, ok := procstat.Of(spin.Process.Pid); ok {
		t.Errorf("a process waited for is still read")
	}
	if s := procstat.Self(); s < self.CPU {
		t.Errorf("Self says %v, less than the %v /proc gave earlier", s, self.CPU)
	}
}
