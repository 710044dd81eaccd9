package pgcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestSweepStale(t *testing.T) {
	// A pid that certainly belonged to a process that is gone now.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	dead := cmd.Process.Pid

	mk := func(owner int) string {
		dir, err := os.MkdirTemp(os.TempDir(), dirPrefix+"sweeptest-*")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if owner != 0 {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	orphan := mk(dead)
	ours := mk(os.Getpid())
	unowned := mk(0) // still being created by someone
	runningServer := mk(dead)
	if err := os.MkdirAll(filepath.Join(runningServer, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runningServer, "data", "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n/data\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	sweepStale()

	exists := func(dir string) bool { _, err := os.Stat(dir); return err == nil }
	if exists(orphan) {
		t.Error("directory of a dead owner survived")
	}
	for _, dir := range []string{ours, unowned, runningServer} {
		if !exists(dir) {
			t.Errorf("%s was removed", dir)
		}
	}
}

func TestVersionLess(t *testing.T) {
	if !versionLess("9.6", "15") || versionLess("15", "9.6") || !versionLess("15", "16") {
		t.Fatal("numeric version order broken")
	}
}

func TestConnValue(t *testing.T) {
	cases := map[string]string{"db": "db", "": "''", "a b": "'a b'", `it's`: `'it\'s'`, `a\b`: `'a\\b'`}
	for in, want := range cases {
		if got := connValue(in); got != want {
			t.Errorf("connValue(%q) = %s, want %s", in, got, want)
		}
	}
}
