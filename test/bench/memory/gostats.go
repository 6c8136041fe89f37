package memory

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// GoMem is where the Go runtime says its memory is, from the Go
// collector's gauges on carve-agent's /metrics (runtime.MemStats' fields).
type GoMem struct {
	// HeapInuse is heap spans holding objects (live or not yet swept).
	HeapInuse uint64
	// HeapRetained is free heap the runtime keeps mapped and resident
	// (HeapIdle less HeapReleased): RSS the program does not use.
	HeapRetained uint64
	// HeapReleased is free heap returned to the OS (not in the RSS).
	HeapReleased uint64
	// HeapAlloc is the bytes of heap objects, live and unswept.
	HeapAlloc uint64
	// Stacks is the goroutine stacks in use (StackInuse).
	Stacks uint64
	// Runtime is the runtime's own metadata: span and cache structures,
	// the GC's bitmaps, the profiling hash table and the rest (MSpanSys,
	// MCacheSys, GCSys, BuckHashSys, OtherSys); mapped, most of it
	// resident.
	Runtime uint64
	// Sys is all the memory the runtime obtained from the OS (virtual).
	Sys uint64
	// Goroutines is their count.
	Goroutines int
	// GOGC is the GC's percent, and MemLimit its soft limit in bytes (the
	// largest int64 when there is none).
	GOGC, MemLimit int64
}

// goGauges names the gauges GoMem is made of.
func goGauges() []string {
	return []string{
		"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
		"go_memstats_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_mspan_sys_bytes",
		"go_memstats_mcache_sys_bytes", "go_memstats_gc_sys_bytes", "go_memstats_buck_hash_sys_bytes",
		"go_memstats_other_sys_bytes", "go_memstats_sys_bytes", "go_goroutines",
		"go_gc_gogc_percent", "go_gc_gomemlimit_bytes",
	}
}

// ScrapeGoMem reads GoMem from the Prometheus text at url (/metrics).
func ScrapeGoMem(ctx context.Context, url string) (GoMem, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return GoMem{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return GoMem{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return GoMem{}, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	g, err := parseGoMem(resp.Body)
	if err != nil {
		return GoMem{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return g, nil
}

// parseGoMem reads the unlabelled gauges of goGauges() from Prometheus text.
func parseGoMem(r io.Reader) (GoMem, error) {
	v := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			v[name] = f
		}
	}
	if err := sc.Err(); err != nil {
		return GoMem{}, err
	}
	for _, n := range goGauges() {
		if _, ok := v[n]; !ok {
			return GoMem{}, fmt.Errorf("no gauge %s", n)
		}
	}
	u := func(n string) uint64 { return uint64(v[n]) }
	return GoMem{
		HeapInuse:    u("go_memstats_heap_inuse_bytes"),
		HeapRetained: u("go_memstats_heap_idle_bytes") - min(u("go_memstats_heap_released_bytes"), u("go_memstats_heap_idle_bytes")),
		HeapReleased: u("go_memstats_heap_released_bytes"),
		HeapAlloc:    u("go_memstats_alloc_bytes"),
		Stacks:       u("go_memstats_stack_inuse_bytes"),
		Runtime: u("go_memstats_mspan_sys_bytes") + u("go_memstats_mcache_sys_bytes") + u("go_memstats_gc_sys_bytes") +
			u("go_memstats_buck_hash_sys_bytes") + u("go_memstats_other_sys_bytes"),
		Sys:        u("go_memstats_sys_bytes"),
		Goroutines: int(v["go_goroutines"]),
		GOGC:       int64(v["go_gc_gogc_percent"]),
		MemLimit:   toInt64(v["go_gc_gomemlimit_bytes"]),
	}, nil
}

// toInt64 converts f, saturating at math.MaxInt64 (no memory limit is the
// largest int64, which a float64 rounds up to 2^63).
func toInt64(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(f)
}
