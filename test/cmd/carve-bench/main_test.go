package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/test/bench/report"
)

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    options
		wantErr string
	}{
		{args: []string{"--write", "d.md", "--agent", "a"}, want: options{write: "d.md", agent: "a", command: "make bench"}},
		{args: []string{"--only", "reconfig, planning"}, want: options{only: []string{"reconfig", "planning"}, command: "make bench"}},
		{args: []string{"--only", "speed"}, wantErr: `unknown measurement "speed"`},
		{args: []string{"--only", "live", "--write", "d.md"}, wantErr: "would drop the other measurements"},
		{args: []string{"stray"}, wantErr: "unexpected arguments: stray"},
	} {
		got, err := parseOptions(tc.args, &bytes.Buffer{})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(options{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.args, diff)
		}
	}
}

func TestMeasureKeepsErrorsAndChecksTables(t *testing.T) {
	e := &environment{log: &bytes.Buffer{}}
	ok := report.Table{Title: "T", Columns: []string{"a"}, Rows: [][]string{{"1"}}}
	for _, tc := range []struct {
		name    string
		tables  []report.Table
		err     error
		wantErr string
	}{
		{name: "fine", tables: []report.Table{ok}},
		{name: "failed", err: errors.New("boom"), wantErr: "boom"},
		{name: "empty table", tables: []report.Table{{Title: "E", Columns: []string{"a"}}}, wantErr: `table "E": no rows`},
	} {
		m := measurement{name: tc.name, title: tc.name, run: func(context.Context, *environment) ([]report.Table, error) { return tc.tables, tc.err }}
		s := e.measure(context.Background(), m)
		if tc.wantErr == "" && s.Err != nil || tc.wantErr != "" && (s.Err == nil || !strings.Contains(s.Err.Error(), tc.wantErr)) {
			t.Errorf("%s: error %v, want %q", tc.name, s.Err, tc.wantErr)
		}
	}
	// A cluster measurement without an agent binary fails before starting anything.
	s := e.measure(context.Background(), measurement{name: "c", cluster: true, run: func(context.Context, *environment) ([]report.Table, error) {
		t.Error("ran without a cluster")
		return nil, nil
	}})
	if s.Err == nil || e.cluster != nil {
		t.Errorf("cluster measurement without --agent: err %v, cluster %v", s.Err, e.cluster)
	}
}

// TestShortRunInMemory runs the measurements that need no cluster in their
// short mode through the program, as make bench would, and checks that
// every one printed a table with a ratio column.
func TestShortRunInMemory(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"--short", "--only", "allocate,reconfig,planning"}, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	if n := strings.Count(out.String(), "### "); n < 3 {
		t.Errorf("printed %d tables, want at least 3:\n%s", n, out.String())
	}
	if !strings.Contains(strings.ToLower(out.String()), "ratio") {
		t.Errorf("no ratio column printed:\n%s", out.String())
	}
	for _, want := range []string{"## Goals", "| carve's plans have the fewest operations: ops ratio (carve/brute force) 1.00x in every case | 3. Planning cost as machines grow | met |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("goals printed lack %q:\n%s", want, out.String())
		}
	}
}
