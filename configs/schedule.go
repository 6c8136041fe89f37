package configs

import (
	"fmt"
	"strings"
	"time"

	// Embedded time zone data, so that timeZone works in minimal containers
	// without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// cronSchedule is a compiled five-field cron schedule read on the wall
// clock of a time zone.
//
// robfig/cron evaluates schedules in the zone itself, which skips a start
// whose wall-clock time falls in the hour that clocks skip in spring and
// starts twice when it falls in the hour that repeats in autumn. To avoid
// that, the expression is evaluated on a wall clock without daylight saving
// time (the zone's local fields written as UTC), and each wall-clock start
// is then mapped to an instant of the zone period it falls in:
//
//   - a start in the skipped hour happens at the instant clocks jump;
//   - a start in the repeated hour happens once, at its first occurrence;
//   - schedules that fire in every hour of the day are the exception: they
//     run by elapsed time, so skipped times simply do not occur and repeated
//     times occur twice.
type cronSchedule struct {
	spec   *cron.SpecSchedule // wall clock, Location UTC
	loc    *time.Location
	hourly bool // fires in every hour of the day
}

// maxZoneSteps bounds the zone periods one next call walks through.
const maxZoneSteps = 64

// cronFieldNames name the five fields in messages.
const cronFieldNames = "minute hour day-of-month month day-of-week"

// compileSchedule parses a five-field cron expression for a time zone.
func compileSchedule(expr string, loc *time.Location) (*cronSchedule, error) {
	trimmed := strings.TrimSpace(expr)
	if strings.HasPrefix(trimmed, "CRON_TZ=") || strings.HasPrefix(trimmed, "TZ=") {
		return nil, fmt.Errorf("time zone prefixes are not supported; give the zone in timeZone")
	}
	if n := len(strings.Fields(trimmed)); n != 5 {
		return nil, fmt.Errorf("want 5 cron fields (%s), got %d", cronFieldNames, n)
	}
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	s, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("invalid cron expression: %w", err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("invalid cron expression: unexpected schedule type %T", s)
	}
	spec.Location = time.UTC
	const allHours = 1<<24 - 1
	c := &cronSchedule{spec: spec, loc: loc, hourly: spec.Hour&allHours == allHours}
	// robfig/cron gives up after five years; a schedule that finds nothing
	// in that time (the 30th of February) never fires.
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("schedule never fires")
	}
	return c, nil
}

// wallClock returns the wall-clock reading of t in its zone, written as a
// UTC time with the same fields.
func wallClock(lt time.Time) time.Time {
	_, off := lt.Zone()
	return time.Unix(lt.Unix()+int64(off), int64(lt.Nanosecond())).UTC()
}

// next returns the first start strictly after from, or the zero time when
// there is none.
func (c *cronSchedule) next(from time.Time) time.Time {
	t, inclusive := from, false
	for range maxZoneSteps {
		lt := t.In(c.loc)
		_, off := lt.Zone()
		zoneStart, zoneEnd := lt.ZoneBounds()
		arg := wallClock(lt)
		if inclusive {
			arg = arg.Add(-time.Nanosecond)
		}
		w := c.spec.Next(arg)
		if w.IsZero() {
			return time.Time{}
		}
		at := time.Unix(w.Unix()-int64(off), 0).In(c.loc)
		if zoneEnd.IsZero() || at.Before(zoneEnd) {
			if !c.hourly && c.repeated(w, zoneStart) {
				// This wall-clock time already occurred, and started a
				// window, before clocks went back.
				t, inclusive = at, false
				continue
			}
			return at
		}
		// The start lies beyond this zone period.
		_, offNext := zoneEnd.In(c.loc).Zone()
		if offNext > off && !c.hourly && w.Before(time.Unix(zoneEnd.Unix()+int64(offNext), 0).UTC()) {
			// w falls in the hour clocks skip: start when they jump.
			return zoneEnd
		}
		t, inclusive = zoneEnd, true
	}
	return time.Time{}
}

// repeated reports whether the wall-clock time w, which occurs in the zone
// period starting at zoneStart, also occurred in the period before it,
// because clocks went back at zoneStart.
func (c *cronSchedule) repeated(w, zoneStart time.Time) bool {
	if zoneStart.IsZero() {
		return false
	}
	prev := zoneStart.Add(-time.Nanosecond).In(c.loc)
	_, offPrev := prev.Zone()
	_, off := zoneStart.In(c.loc).Zone()
	if offPrev <= off {
		return false
	}
	return w.Before(time.Unix(zoneStart.Unix()+int64(offPrev), 0).UTC())
}

// schedule returns the compiled schedule, compiling it when r was not made
// by Parse.
func (r *Recurrence) schedule() (*cronSchedule, error) {
	if r.sched != nil {
		return r.sched, nil
	}
	loc, err := loadZone(r.TimeZone)
	if err != nil {
		return nil, err
	}
	return compileSchedule(r.Schedule, loc)
}

// loadZone loads an IANA time zone; "" means UTC. "Local" is refused: it
// would depend on the machine.
func loadZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("time zone Local depends on the machine; name an IANA zone such as Europe/Berlin")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as Europe/Berlin or UTC): %w", name, err)
	}
	return loc, nil
}

// active reports whether an occurrence of the recurrence covers t: a start
// s with t-Duration < s <= t. A recurrence that does not compile is never
// active.
func (r *Recurrence) active(t time.Time) bool {
	c, err := r.schedule()
	if err != nil || r.Duration <= 0 {
		return false
	}
	s := c.next(t.Add(-r.Duration))
	return !s.IsZero() && !s.After(t)
}
