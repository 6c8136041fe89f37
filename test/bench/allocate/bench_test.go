package allocate

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkCases times each case's call on one side alone, for profiling
// (go test -run='^$' -bench=Cases/.*/carve -cpuprofile cpu.out); the
// figures of docs/benchmarks.md come from Run, interleaved.
func BenchmarkCases(b *testing.B) {
	ctx := context.Background()
	b.Cleanup(silenceKlog())
	bn, err := startBench(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := bn.close(); err != nil {
			b.Error(err)
		}
	})
	for i, c := range bn.cases() {
		carve, stub := c.calls()
		for _, s := range []struct {
			name string
			call call
		}{{"carve", carve}, {"stub", stub}} {
			b.Run(fmt.Sprintf("%d/%s", i, s.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := s.call(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
