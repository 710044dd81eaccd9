package api

import "time"

// SetRequestTimeouts sets the deadlines of reads and of other requests (see catalogTimeout)
// until restore is called. Call it before the server is made, and restore once it is closed.
func SetRequestTimeouts(read, write time.Duration) (restore func()) {
	r, w := readTimeout, writeTimeout
	readTimeout, writeTimeout = read, write
	return func() { readTimeout, writeTimeout = r, w }
}
