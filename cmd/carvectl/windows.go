package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func runWindows(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("windows", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "profiles file (profiles.yaml)")
	labels := fs.String("node-labels", "", "the node's labels, k=v,k2=v2")
	from := fs.String("from", "", "start time, RFC 3339 (default now)")
	span := fs.String("for", "7d", "how far to look ahead (Go duration, or days like 7d)")
	tz := fs.String("tz", "Local", "time zone to print times in (IANA name)")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
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
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tUNTIL\tPROFILE\tSOURCE\tWINDOW")
	for _, s := range f.Timeline(lbls, start, d) {
		until := s.End.In(loc).Format("2006-01-02 15:04 MST")
		if s.End.IsZero() {
			until = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Start.In(loc).Format("2006-01-02 15:04 MST"), until,
			orDash(s.Profile), s.Source, orDash(s.Window))
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
