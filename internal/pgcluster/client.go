package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ClientProgram finds a PostgreSQL client program (pg_dump, pg_restore) the way the server
// binaries are found: in $DECKHAND_PG_BIN, else the directory BinDir discovers, else on PATH
// (a machine with the client programs only).
func ClientProgram(name string) (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s has no %s", EnvBinDir, dir, name)
		}
		return p, nil
	}
	if dir, err := discoveredBinDir(); err == nil {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (set %s to the directory of PostgreSQL's programs, or put it on PATH)", name, EnvBinDir)
	}
	return p, nil
}
