package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// dueTimes lists the n due times of timing after from, in UTC.
func dueTimes(timing Timing, from time.Time, n int) []string {
	var out []string
	for range n {
		from = timing.Next(from)
		out = append(out, from.UTC().Format("01-02 15:04Z"))
	}
	return out
}

// Across both changes of daylight saving time in New York (2026-03-08 02:00 → 03:00 and
// 2026-11-01 02:00 → 01:00): a daily time that the spring change skips is due at the instant
// it would have been (03:30 EDT, 07:30Z), once; a daily time the autumn change repeats is due
// once, at its first occurrence (01:30 EDT); a half-hourly schedule stays half-hourly in real
// time through both, never going backwards or firing twice for one instant.
func TestCronAcrossDaylightSavingTime(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	cases := []struct {
		expr string
		from time.Time
		want []string
	}{
		{"30 2 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny),
			[]string{"03-07 07:30Z", "03-08 07:30Z", "03-09 06:30Z"}},
		{"30 1 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny),
			[]string{"11-01 05:30Z", "11-02 06:30Z"}},
		{"*/30 * * * *", time.Date(2026, 3, 8, 0, 45, 0, 0, ny),
			[]string{"03-08 06:00Z", "03-08 06:30Z", "03-08 07:00Z", "03-08 07:30Z", "03-08 08:00Z"}},
		{"*/30 * * * *", time.Date(2026, 11, 1, 0, 45, 0, 0, ny),
			// 01:00 and 01:30 EDT, then 01:00 and 01:30 EST repeat them: skipped; 02:00 EST.
			[]string{"11-01 05:00Z", "11-01 05:30Z", "11-01 07:00Z", "11-01 07:30Z"}},
		{"0 9 * * 1", time.Date(2026, 3, 1, 0, 0, 0, 0, ny), // Mondays 09:00, before and after the change
			[]string{"03-02 14:00Z", "03-09 13:00Z", "03-16 13:00Z"}},
	}
	for _, c := range cases {
		timing, err := ParseCron(c.expr, "America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		got := dueTimes(timing, c.from, len(c.want))
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q from %s:\n got  %v\n want %v", c.expr, c.from, got, c.want)
		}
	}
	// East of Greenwich too: Paris skips 02:00-03:00 on 2026-03-29.
	timing, err := ParseCron("30 2 * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	paris := mustZone(t, "Europe/Paris")
	got := dueTimes(timing, time.Date(2026, 3, 28, 12, 0, 0, 0, paris), 2)
	if want := []string{"03-29 01:30Z", "03-30 00:30Z"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Paris: got %v, want %v", got, want)
	}
}

func TestParseTimingRefusals(t *testing.T) {
	for _, c := range []struct {
		cron, tz string
		every    time.Duration
		want     string
	}{
		{"", "", 0, "give a cron expression"},
		{"* * * * *", "", time.Minute, "not both"},
		{"", "", 500 * time.Millisecond, "the shortest is 1s"},
		{"", "UTC", time.Minute, "cron expressions only"},
		{"61 * * * *", "", 0, `cron "61 * * * *"`},
		{"* * * *", "", 0, "expected exactly 5 fields"},
		{"* * * * *", "Mars/Olympus", 0, "unknown time zone"},
		{"CRON_TZ=UTC * * * * *", "", 0, "--timezone"},
		{"@every 5m", "", 0, "use --every"},
		{"0 0 30 2 *", "", 0, "never comes due"},
	} {
		_, err := ParseTiming(c.cron, c.tz, c.every)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTiming(%q, %q, %s) = %v, want an error containing %q", c.cron, c.tz, c.every, err, c.want)
		}
	}
	if _, err := ParseTiming("@daily", "Asia/Tokyo", 0); err != nil {
		t.Errorf("@daily in Tokyo: %v", err)
	}
}

// A missed window's latest due time and how many came before it.
func TestLatest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	last, n := latest(Every(time.Minute), t0, t0.Add(10*time.Minute+30*time.Second))
	if !last.Equal(t0.Add(10*time.Minute)) || n != 10 {
		t.Errorf("every minute: %s, %d", last, n)
	}
	hourly, _ := ParseCron("0 * * * *", "")
	last, n = latest(hourly, t0, t0.Add(5*time.Hour+time.Minute))
	if !last.Equal(t0.Add(5*time.Hour)) || n != 5 {
		t.Errorf("hourly: %s, %d", last, n)
	}
}

// A window of years of per-minute due times is handled in bounded time: the last day's due
// times are walked through, the count is a lower bound.
func TestLatestOfAHugeWindow(t *testing.T) {
	everyMinute, _ := ParseCron("* * * * *", "")
	due := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 1, 1, 12, 30, 30, 0, time.UTC)
	began := time.Now()
	last, n := latest(everyMinute, due, now)
	if !last.Equal(time.Date(2026, 1, 1, 12, 30, 0, 0, time.UTC)) || n < maxCounted {
		t.Errorf("latest: %s, %d", last, n)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("took %s", took)
	}
}
