package configs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/robfig/cron/v3"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := loadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustSchedule(t testing.TB, expr, zone string) *cronSchedule {
	t.Helper()
	c, err := compileSchedule(expr, mustZone(t, zone))
	if err != nil {
		t.Fatalf("compileSchedule(%q): %v", expr, err)
	}
	return c
}

func utc(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

// starts lists the first n starts after from.
func starts(c *cronSchedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		from = c.next(from)
		if from.IsZero() {
			break
		}
		out = append(out, from)
	}
	return out
}

// In Europe/Berlin, 2025-03-30 01:00 UTC clocks jump from 02:00 CET to
// 03:00 CEST; 2025-10-26 01:00 UTC they go back from 03:00 CEST to 02:00 CET.
func TestScheduleDSTBerlin(t *testing.T) {
	tests := []struct {
		name string
		expr string
		from time.Time
		want []time.Time
	}{
		{"spring: a start in the skipped hour happens when clocks jump", "30 2 * * *", utc(2025, 3, 29, 0, 0), []time.Time{
			utc(2025, 3, 29, 1, 30), // 02:30 CET
			utc(2025, 3, 30, 1, 0),  // 02:30 does not exist: 03:00 CEST
			utc(2025, 3, 31, 0, 30), // 02:30 CEST
		}},
		{"spring: 02:00 happens at the jump too", "0 2 * * *", utc(2025, 3, 29, 0, 0), []time.Time{
			utc(2025, 3, 29, 1, 0), utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 0),
		}},
		{"spring: several starts in the gap collapse into one", "*/20 2 * * *", utc(2025, 3, 30, 0, 0), []time.Time{
			utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 0), utc(2025, 3, 31, 0, 20),
		}},
		{"spring: hours after the gap are untouched", "0 3 * * *", utc(2025, 3, 29, 0, 0), []time.Time{
			utc(2025, 3, 29, 2, 0), utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 1, 0),
		}},
		{"spring: hourly schedules skip the missing hour", "30 * * * *", utc(2025, 3, 29, 23, 0), []time.Time{
			utc(2025, 3, 29, 23, 30), // 00:30 CET
			utc(2025, 3, 30, 0, 30),  // 01:30 CET
			utc(2025, 3, 30, 1, 30),  // 03:30 CEST
			utc(2025, 3, 30, 2, 30),
		}},
		{"autumn: a start in the repeated hour happens once, the first time", "30 2 * * *", utc(2025, 10, 25, 0, 0), []time.Time{
			utc(2025, 10, 25, 0, 30), // 02:30 CEST
			utc(2025, 10, 26, 0, 30), // 02:30 CEST; not again at 02:30 CET
			utc(2025, 10, 27, 1, 30), // 02:30 CET
		}},
		{"autumn: from inside the repeated hour", "*/30 2 * * *", utc(2025, 10, 26, 0, 10), []time.Time{
			utc(2025, 10, 26, 0, 30), // 02:30 CEST
			utc(2025, 10, 27, 1, 0),  // 02:00 CET the next day
		}},
		{"autumn: from the second pass of the hour", "*/30 2 * * *", utc(2025, 10, 26, 1, 10), []time.Time{
			utc(2025, 10, 27, 1, 0),
		}},
		{"autumn: hourly schedules fire in both passes", "30 * * * *", utc(2025, 10, 25, 23, 0), []time.Time{
			utc(2025, 10, 25, 23, 30), // 01:30 CEST
			utc(2025, 10, 26, 0, 30),  // 02:30 CEST
			utc(2025, 10, 26, 1, 30),  // 02:30 CET
			utc(2025, 10, 26, 2, 30),  // 03:30 CET
		}},
		{"autumn: an hour after the change", "0 3 * * *", utc(2025, 10, 25, 0, 0), []time.Time{
			utc(2025, 10, 25, 1, 0), utc(2025, 10, 26, 2, 0), utc(2025, 10, 27, 2, 0),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustSchedule(t, tc.expr, "Europe/Berlin")
			got := starts(c, tc.from, len(tc.want))
			// cmp compares the times with time.Time.Equal, as instants:
			// the starts are in Berlin time, the wanted ones in UTC.
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("starts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// robfig/cron on its own misses the start on the spring day and starts
// twice on the autumn day; the test documents why cronSchedule exists.
func TestRobfigDSTBehaviour(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	s, err := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	spec := s.(*cron.SpecSchedule)
	spec.Location = berlin
	if got := spec.Next(utc(2025, 3, 29, 12, 0)); !got.Equal(utc(2025, 3, 31, 0, 30)) {
		t.Errorf("robfig/cron now starts %s after the spring change; update docs/profiles.md", got.UTC())
	}
	first := spec.Next(utc(2025, 10, 25, 12, 0))
	if second := spec.Next(first); !second.Equal(utc(2025, 10, 26, 1, 30)) {
		t.Errorf("robfig/cron no longer starts twice in the repeated hour (%s, %s); update docs/profiles.md", first.UTC(), second.UTC())
	}
}

// Over a whole year, a daily schedule starts exactly once per local day in
// every zone, whatever its clock changes, and a start is either at a
// wall-clock time the schedule names or at a clock change.
func TestScheduleDailyOncePerDay(t *testing.T) {
	tests := []struct {
		zone string
		year int
		expr string
	}{
		{"Europe/Berlin", 2025, "30 2 * * *"},
		{"Europe/Berlin", 2025, "0 2 * * *"},
		{"Europe/Berlin", 2025, "59 2 * * *"},
		{"America/New_York", 2025, "30 2 * * *"},
		{"America/New_York", 2025, "30 1 * * *"},
		{"Australia/Sydney", 2025, "30 2 * * *"},
		{"Australia/Lord_Howe", 2025, "15 2 * * *"}, // 30-minute change
		{"America/Sao_Paulo", 2018, "0 0 * * *"},    // midnight skipped on 2018-11-04
		{"America/Sao_Paulo", 2018, "30 23 * * *"},  // 23:xx repeated on 2018-02-17
		{"UTC", 2025, "0 12 * * *"},
	}
	for _, tc := range tests {
		t.Run(tc.zone+" "+tc.expr, func(t *testing.T) {
			loc := mustZone(t, tc.zone)
			c := mustSchedule(t, tc.expr, tc.zone)
			from := time.Date(tc.year, 1, 1, 0, 0, 0, 0, loc).Add(-time.Nanosecond)
			to := time.Date(tc.year+1, 1, 1, 0, 0, 0, 0, loc)
			days := map[string]int{}
			prev := from
			for s := c.next(from); !s.IsZero() && s.Before(to); s = c.next(s) {
				if !s.After(prev) {
					t.Fatalf("starts not increasing: %s then %s", prev, s)
				}
				prev = s
				local := s.In(loc)
				days[local.Format("2006-01-02")]++
				wantH, wantM := c.spec.Hour, c.spec.Minute
				atNamedTime := wantH&(1<<uint(local.Hour())) != 0 && wantM&(1<<uint(local.Minute())) != 0
				zoneStart, _ := local.ZoneBounds()
				if !atNamedTime && !local.Equal(zoneStart) {
					t.Errorf("start %s is neither a named time nor a clock change", local)
				}
			}
			want := 365
			if len(days) != want {
				t.Errorf("starts on %d days, want %d", len(days), want)
			}
			for d, n := range days {
				if n != 1 {
					t.Errorf("%s: %d starts", d, n)
				}
			}
		})
	}
}

func TestRecurrenceActiveAndBoundaries(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	night := Recurrence{Schedule: "0 20 * * *", Duration: 10 * time.Hour, TimeZone: "Europe/Berlin"}
	tests := []struct {
		name   string
		r      Recurrence
		at     time.Time
		active bool
		next   time.Time // next change of active; zero: none within a year
	}{
		{"before the start", night, time.Date(2025, 6, 2, 19, 59, 0, 0, berlin), false, time.Date(2025, 6, 2, 20, 0, 0, 0, berlin)},
		{"at the start", night, time.Date(2025, 6, 2, 20, 0, 0, 0, berlin), true, time.Date(2025, 6, 3, 6, 0, 0, 0, berlin)},
		{"after midnight", night, time.Date(2025, 6, 3, 5, 59, 0, 0, berlin), true, time.Date(2025, 6, 3, 6, 0, 0, 0, berlin)},
		{"at the end", night, time.Date(2025, 6, 3, 6, 0, 0, 0, berlin), false, time.Date(2025, 6, 3, 20, 0, 0, 0, berlin)},
		// The night of the autumn change lasts 10h of elapsed time: it
		// ends at 05:00 CET on the wall clock.
		{"autumn night ends an hour early on the wall clock", night, time.Date(2025, 10, 26, 4, 59, 0, 0, berlin), true, time.Date(2025, 10, 26, 5, 0, 0, 0, berlin)},
		{"autumn night over", night, time.Date(2025, 10, 26, 5, 0, 0, 0, berlin), false, time.Date(2025, 10, 26, 20, 0, 0, 0, berlin)},
		{"spring night ends at 07:00 CEST", night, time.Date(2025, 3, 30, 6, 30, 0, 0, berlin), true, time.Date(2025, 3, 30, 7, 0, 0, 0, berlin)},
		{"overlapping occurrences join: active for good", Recurrence{Schedule: "0 * * * *", Duration: 90 * time.Minute}, utc(2025, 1, 1, 10, 45), true, time.Time{}},
		{"a one-minute window", Recurrence{Schedule: "0 12 * * *", Duration: time.Minute}, utc(2025, 1, 1, 12, 0), true, utc(2025, 1, 1, 12, 1)},
		{"a week-long window every week never ends", Recurrence{Schedule: "0 0 * * 1", Duration: 168 * time.Hour}, utc(2025, 1, 5, 23, 59), true, time.Time{}},
		{"a week-long window every other month ends", Recurrence{Schedule: "0 0 1 */2 *", Duration: 168 * time.Hour}, utc(2025, 1, 5, 23, 59), true, utc(2025, 1, 8, 0, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.active(tc.at); got != tc.active {
				t.Errorf("active(%s) = %v, want %v", tc.at, got, tc.active)
			}
			if got := nextChange(&tc.r, tc.at); !got.Equal(tc.next) {
				t.Errorf("next change after %s = %s, want %s", tc.at, got, tc.next)
			}
		})
	}
}

// nextChange is the first instant after at, within a year, at which r
// becomes active or stops being active; zero for none.
func nextChange(r *Recurrence, at time.Time) time.Time {
	sw := newSweep([]*Recurrence{r}, nil, at, at.Add(366*24*time.Hour), timelineBudget)
	t, _ := sw.Advance()
	return t
}

func TestRecurrenceNotCompiled(t *testing.T) {
	bad := Recurrence{Schedule: "nope", Duration: time.Hour}
	if bad.active(utc(2025, 1, 1, 0, 0)) || !nextChange(&bad, utc(2025, 1, 1, 0, 0)).IsZero() {
		t.Error("a schedule that does not compile must never be active")
	}
	handMade := Recurrence{Schedule: "0 1 * * *", Duration: time.Hour, TimeZone: "Asia/Tokyo"}
	if !handMade.active(utc(2025, 1, 1, 16, 30)) { // 01:30 JST
		t.Error("a hand-made recurrence must compile on demand")
	}
}
