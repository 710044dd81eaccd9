package pgtest

import (
	"fmt"
	"os"
	"strings"
)

// Password returns the password CreateLoginRole gave role, read back from this process's
// pgpass file, for a test that must hand it over itself (to sign in over HTTP, say).
func Password(role string) (string, error) {
	passfile.Lock()
	path := passfile.path
	passfile.Unlock()
	if path == "" {
		return "", fmt.Errorf("pgtest: no password recorded for role %q", role)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("pgtest: pgpass: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// host:port:database:user:password, with ':' and '\' escaped by '\'.
		var fields []string
		var cur strings.Builder
		for i := 0; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line):
				i++
				cur.WriteByte(line[i])
			case line[i] == ':':
				fields = append(fields, cur.String())
				cur.Reset()
			default:
				cur.WriteByte(line[i])
			}
		}
		fields = append(fields, cur.String())
		if len(fields) == 5 && fields[3] == role {
			return fields[4], nil
		}
	}
	return "", fmt.Errorf("pgtest: no password recorded for role %q", role)
}
