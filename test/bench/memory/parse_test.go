package memory

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseSmaps(t *testing.T) {
	in := `00400000-00411000 r--p 00000000 fd:00 123 /usr/bin/carve agent
Size:                 68 kB
Rss:                  68 kB
00411000-01c78000 r-xp 00011000 fd:00 123 /usr/bin/carve agent
Rss:                1000 kB
Anonymous:             0 kB
c000000000-c004000000 rw-p 00000000 00:00 0
Rss:                 512 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:00 9 /lib/x86_64-linux-gnu/libc.so.6
Rss:                 300 kB
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  12 kB
VmFlags: rd wr mr mw me gd ac
`
	got, err := parseSmaps(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"/usr/bin/carve agent": 1068 << 10, "": 512 << 10, "/lib/x86_64-linux-gnu/libc.so.6": 300 << 10, "[stack]": 12 << 10}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: %d, want %d", k, got[k], v)
		}
	}
}

func TestKBLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		name string
		kb   uint64
		ok   bool
	}{
		{"VmRSS:\t   65536 kB", "VmRSS", 65536, true},
		{"Rss:                1748 kB", "Rss", 1748, true},
		{"Threads:\t8", "", 0, false},
		{"VmFlags: rd wr mr", "", 0, false},
		{"00400000-00411000 r--p 00000000 fd:00 123 /bin/x", "", 0, false},
	} {
		name, kb, ok := kbLine(tc.line)
		if name != tc.name || kb != tc.kb || ok != tc.ok {
			t.Errorf("kbLine(%q) = %q, %d, %v; want %q, %d, %v", tc.line, name, kb, ok, tc.name, tc.kb, tc.ok)
		}
	}
}

func TestParseGoMem(t *testing.T) {
	var b strings.Builder
	b.WriteString("# HELP go_memstats_heap_inuse_bytes whatever\n# TYPE go_memstats_heap_inuse_bytes gauge\n")
	vals := map[string]string{
		"go_memstats_heap_inuse_bytes": "8e+06", "go_memstats_heap_idle_bytes": "3e+06", "go_memstats_heap_released_bytes": "1e+06",
		"go_memstats_alloc_bytes": "6e+06", "go_memstats_stack_inuse_bytes": "1.048576e+06", "go_memstats_mspan_sys_bytes": "100",
		"go_memstats_mcache_sys_bytes": "200", "go_memstats_gc_sys_bytes": "300", "go_memstats_buck_hash_sys_bytes": "400",
		"go_memstats_other_sys_bytes": "500", "go_memstats_sys_bytes": "2e+07", "go_goroutines": "47",
		"go_gc_gogc_percent": "100", "go_gc_gomemlimit_bytes": "9.223372036854776e+18",
	}
	for k, v := range vals {
		b.WriteString(k + " " + v + "\n")
	}
	b.WriteString(`carve_agent_devices_advertised{resource="nvidia.com/gpu"} 8` + "\n")
	g, err := parseGoMem(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := GoMem{HeapInuse: 8e6, HeapRetained: 2e6, HeapReleased: 1e6, HeapAlloc: 6e6, Stacks: 1 << 20, Runtime: 1500,
		Sys: 2e7, Goroutines: 47, GOGC: 100, MemLimit: math.MaxInt64}
	if g != want {
		t.Errorf("got %+v, want %+v", g, want)
	}
	if _, err := parseGoMem(strings.NewReader("go_goroutines 3\n")); err == nil {
		t.Error("no error for missing gauges")
	}
}

func TestReadMemSelf(t *testing.T) {
	m, err := ReadMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS == 0 || m.Peak < m.RSS || m.Anon == 0 || m.Binary == 0 || m.BinaryMapped == 0 || m.Threads == 0 {
		t.Errorf("implausible reading of the test process: %+v", m)
	}
}

// TestTables checks the tables of a made-up Result: rows as long as the
// columns, the ratios of the figures.
func TestTables(t *testing.T) {
	r := func(state string, rss uint64) Reading {
		return Reading{State: state, Devices: 8, Max: rss + 1<<20, Settled: Mem{RSS: rss, Peak: rss, Anon: 10 << 20, File: rss - 10<<20}}
	}
	res := Result{Agent: []Reading{r("idle", 50<<20), r("again", 52<<20), r("dense", 60<<20)}, Floor: r("floor", 40<<20),
		NarrowFloor: r("narrow", 20<<20), DRA: []Reading{r("DRA idle", 44<<20), r("DRA dense", 45<<20)}, DRAFloor: r("DRA floor", 50<<20)}
	tables := Tables(res, false)
	if len(tables) != 3 {
		t.Fatalf("%d tables, want 3", len(tables))
	}
	for _, tb := range tables {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
		if tb.Command != "make bench BENCH=memory" || tb.About == "" || len(tb.Notes) == 0 {
			t.Errorf("table %q: command %q, about %d bytes, %d notes", tb.Title, tb.Command, len(tb.About), len(tb.Notes))
		}
	}
	for i, wants := range [][]string{
		{"| 61.0 MiB | 60.0 MiB | 40.0 MiB | 1.50x | 20.0 MiB | 3.00x | 40.0 MiB | 1.50x | 64.0 MiB | 0.94x |", "Goal not met", "3.00x at 896 devices"},
		{"| 46.0 MiB | 45.0 MiB | 50.0 MiB | 0.90x | 20.0 MiB | 2.25x | 40.0 MiB | 1.12x |", "Goal not met"},
		{"| RSS | 50.0 MiB | 52.0 MiB | 60.0 MiB | 44.0 MiB | 45.0 MiB | 40.0 MiB | 20.0 MiB | 50.0 MiB | 1.50x | 3.00x |"},
	} {
		md := tables[i].Markdown()
		for _, want := range wants {
			if !strings.Contains(md, want) {
				t.Errorf("table %d lacks %q:\n%s", i, want, md)
			}
		}
	}
}
