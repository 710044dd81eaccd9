package api

import (
	"net/url"
	"regexp"
	"strings"
)

const redacted = "REDACTED"

var (
	// keyword/value conninfo: password=secret, password = 'se cret', sslpassword=...
	kvSecret = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s]*)`)
	// userinfo with a password inside a URL anywhere in a text, such as an error message.
	urlUserinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^:/@\s]*):[^@/\s]*@`)
)

// RedactConninfo hides passwords in a PostgreSQL conninfo, keyword/value or URL, or in any
// text quoting one. deckhand refuses conninfo with a password when a node is added, so this
// only guards against rows written some other way.
func RedactConninfo(s string) string {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		if u, err := url.Parse(s); err == nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), redacted)
			}
			q := u.Query()
			changed := false
			for k := range q {
				if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
					q.Set(k, redacted)
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}:"+redacted+"@")
	return kvSecret.ReplaceAllString(s, "${1}="+redacted)
}
