package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/carve-dev/carve/configs"
)

func runWindows(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("windows", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "profiles file (profiles.yaml)")
	labels := fs.String("node-labels", "", "the node's labels, k=v,k2=v2")
	from := fs.String("from", "", "start time, RFC 3339 (default now)")
	span := fs.String("for", "7d", "how far to look ahead (Go duration, or days like 7d)")
	tz := fs.String("tz", "Local", "time zone to print times in (IANA name)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := loadFile(*file, stdout)
	if err != nil {
		return err
	}
	lbls, err := parseLabels(*labels)
	if err != nil {
		return err
	}
	start := time.Now()
	if *from != "" {
		if start, err = time.Parse(time.RFC3339, *from); err != nil {
			return fmt.Errorf("--from %q: want RFC 3339, e.g. 2026-11-23T20:00:00+01:00: %w", *from, err)
		}
	}
	d, err := parseSpan(*span)
	if err != nil {
		return fmt.Errorf("--for %q: %w", *span, err)
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return fmt.Errorf("--tz %q: %w", *tz, err)
	}
	spans, cut := f.Timeline(lbls, start, d)
	if err := writeTimeline(stdout, spans, loc); err != nil {
		return err
	}
	if !cut.IsZero() {
		fmt.Fprintf(stdout, "note: the timeline stops at %s, not %s: the windows change too often to look further in one go; run again with --from %s\n",
			cut.In(loc).Format(timeFormat), start.Add(d).In(loc).Format(timeFormat), cut.Format(time.RFC3339))
	}
	failed := false
	for _, s := range spans {
		if s.Error != "" {
			failed = true
			fmt.Fprintf(stdout, "error from %s: %s\n", s.Start.In(loc).Format(timeFormat), s.Error)
		}
	}
	if failed {
		return exitError{1}
	}
	return nil
}

const timeFormat = "2006-01-02 15:04 MST"

// writeTimeline writes the spans as a table; a span in which the node's
// selection is an error (its profile label names no profile) shows
// "error" as its profile.
func writeTimeline(w io.Writer, spans []configs.Span, loc *time.Location) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tUNTIL\tPROFILE\tSOURCE\tWINDOW")
	for _, s := range spans {
		until := s.End.In(loc).Format(timeFormat)
		if s.End.IsZero() {
			until = "-"
		}
		profile := orDash(s.Profile)
		if s.Error != "" {
			profile = "error"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Start.In(loc).Format(timeFormat), until, profile, s.Source, orDash(s.Window))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseLabels reads "k=v,k2=v2".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--node-labels: %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// parseSpan reads a Go duration or a number of days ("7d").
func parseSpan(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("want a duration like 36h or 7d")
		}
		if n <= 0 || n > 366 {
			return 0, fmt.Errorf("must be positive and at most a year")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration like 36h or 7d")
		}
	}
	if d <= 0 || d > 366*24*time.Hour {
		return 0, fmt.Errorf("must be positive and at most a year")
	}
	return d, nil
}
