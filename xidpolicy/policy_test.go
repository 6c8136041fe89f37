package xidpolicy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultsAreNVIDIAs(t *testing.T) {
	p, err := Parse(DefaultSettings())
	if err != nil {
		t.Fatalf("default settings: %v", err)
	}
	if diff := cmp.Diff(Default(), p); diff != "" {
		t.Errorf("parsed default settings differ from Default (-want +got):\n%s", diff)
	}
	// NVIDIA's device plugin ignores these application XIDs and treats
	// every other one as keeping the device unhealthy.
	for _, x := range []uint64{13, 31, 43, 45, 68, 109} {
		if c := p.Classify(x); c != Ignored {
			t.Errorf("XID %d is %v by default, want ignored", x, c)
		}
	}
	for _, x := range []uint64{1, 48, 63, 64, 74, 79, 92, 94, 95, 119, 154} {
		if c := p.Classify(x); c != Critical {
			t.Errorf("XID %d is %v by default, want critical", x, c)
		}
	}
	if p.Quiet != 5*time.Minute {
		t.Errorf("default quiet period %v, want 5m", p.Quiet)
	}
}

func TestParseClassifiesAndTaints(t *testing.T) {
	s := Settings{Ignored: " 13, 43", Recoverable: "94,92", Quiet: time.Minute, RecoverableTaint: "None", CriticalTaint: "NoExecute"}
	p, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{Ignored: []uint64{13, 43}, Recoverable: []uint64{92, 94}, Quiet: time.Minute, RecoverableTaint: EffectNone, CriticalTaint: NoExecute}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("policy (-want +got):\n%s", diff)
	}
	got := map[uint64]string{}
	for _, x := range []uint64{13, 31, 43, 79, 92, 94} {
		c := p.Classify(x)
		e, ok := p.Taint(c)
		got[x] = c.String() + "/" + string(e)
		if ok == (c == Ignored) {
			t.Errorf("Taint(%v) ok=%v", c, ok)
		}
	}
	wantGot := map[uint64]string{13: "ignored/", 31: "critical/NoExecute", 43: "ignored/", 79: "critical/NoExecute", 92: "recoverable/None", 94: "recoverable/None"}
	if diff := cmp.Diff(wantGot, got); diff != "" {
		t.Errorf("class/taint per XID (-want +got):\n%s", diff)
	}
	// Empty lists: nothing ignored, nothing recoverable.
	p, err = Parse(Settings{Quiet: time.Second, RecoverableTaint: "NoSchedule", CriticalTaint: "NoSchedule"})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Classify(13); c != Critical {
		t.Errorf("XID 13 with no ignored XIDs is %v, want critical", c)
	}
}

func TestParseErrorsNameFlagAndValue(t *testing.T) {
	ok := DefaultSettings()
	tests := []struct {
		name string
		edit func(*Settings)
		want []string // substrings of the error
	}{
		{"not a number", func(s *Settings) { s.Ignored = "13,x1" }, []string{"--xid-ignored", `"13,x1"`, `"x1"`}},
		{"zero", func(s *Settings) { s.Recoverable = "0" }, []string{"--xid-recoverable", `"0"`, "1 to 65535"}},
		{"too large", func(s *Settings) { s.Recoverable = "65536" }, []string{"--xid-recoverable", "65536"}},
		{"negative", func(s *Settings) { s.Ignored = "-13" }, []string{"--xid-ignored", "-13"}},
		{"empty item", func(s *Settings) { s.Ignored = "13,,31" }, []string{"--xid-ignored", `"13,,31"`}},
		{"listed twice", func(s *Settings) { s.Recoverable = "94,94" }, []string{"--xid-recoverable", "XID 94 listed twice"}},
		{"in two classes", func(s *Settings) { s.Recoverable = "48,13" }, []string{"--xid-recoverable", `"48,13"`, "XID 13", "--xid-ignored"}},
		{"too many", func(s *Settings) { s.Recoverable = strings.Repeat("1,", MaxListed) + "1" }, []string{"--xid-recoverable", "at most 1024"}},
		{"zero quiet", func(s *Settings) { s.Quiet = 0 }, []string{"--xid-recovery-quiet", "0s"}},
		{"negative quiet", func(s *Settings) { s.Quiet = -time.Second }, []string{"--xid-recovery-quiet", "-1s"}},
		{"quiet too long", func(s *Settings) { s.Quiet = MaxQuiet + time.Second }, []string{"--xid-recovery-quiet", "168h0m1s"}},
		{"bad recoverable effect", func(s *Settings) { s.RecoverableTaint = "PreferNoSchedule" }, []string{"--xid-taint-recoverable", `"PreferNoSchedule"`, "NoSchedule, NoExecute or None"}},
		{"bad critical effect", func(s *Settings) { s.CriticalTaint = "noexecute" }, []string{"--xid-taint-critical", `"noexecute"`}},
		{"empty effect", func(s *Settings) { s.CriticalTaint = "" }, []string{"--xid-taint-critical", `""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			_, err := Parse(s)
			if err == nil {
				t.Fatalf("Parse(%+v) succeeded", s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
