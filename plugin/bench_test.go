package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/timeslice"
)

// reportPercentiles reports the p50 and p99 of samples in microseconds.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(at(0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(at(0.99).Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkAllocate measures Allocate over real gRPC on the plugin's unix
// socket: one container asking for 2 replicas of a shared resource of
// 8 GPUs x 4 replicas.
func BenchmarkAllocate(b *testing.B) {
	e := newEnv(b, Options{CDI: true}, false)
	e.update(b, timeslice.Resources{sharedRes: sharedGPUs(4, 0, 1, 2, 3, 4, 5, 6, 7)})
	client := dialPlugin(b, e.socket(sharedRes))
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-3::1", "GPU-6::2"}}}}
	ctx := context.Background()
	if _, err := client.Allocate(ctx, req); err != nil { // connect outside the timing
		b.Fatal(err)
	}
	timeCalls(b, func() error { _, err := client.Allocate(ctx, req); return err })
}

// BenchmarkGetPreferredAllocation measures a topology-aware choice of
// 4 of 8 whole GPUs over real gRPC (exact search, 70 sets).
func BenchmarkGetPreferredAllocation(b *testing.B) {
	f := newFakeNVML(8)
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			f.link(i, j, partition.Link{NVLinks: (i*7 + j*3) % 13, PCIe: 10 * (1 + (i+j)%5)})
		}
	}
	e := newEnv(b, Options{NVML: f, Health: HealthOptions{Disabled: true}}, false)
	devs := wholeGPUs(0, 1, 2, 3, 4, 5, 6, 7)
	e.update(b, timeslice.Resources{carvev1.GPUResource: devs})
	var avail []string
	for _, d := range devs {
		avail = append(avail, d.ID)
	}
	client := dialPlugin(b, e.socket(carvev1.GPUResource))
	req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 4}}}
	ctx := context.Background()
	if _, err := client.GetPreferredAllocation(ctx, req); err != nil {
		b.Fatal(err)
	}
	timeCalls(b, func() error { _, err := client.GetPreferredAllocation(ctx, req); return err })
}

// timeCalls runs call b.N times, timing each, and reports p50/p99.
func timeCalls(b *testing.B, call func() error) {
	b.Helper()
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// BenchmarkUpdateToStream measures the time from Update with a changed
// device set (one GPU of 8 x 4 replicas comes or goes) to the new list
// arriving on the stub kubelet's ListAndWatch stream.
func BenchmarkUpdateToStream(b *testing.B) {
	e := newEnv(b, Options{}, false)
	full := timeslice.Resources{sharedRes: sharedGPUs(4, 0, 1, 2, 3, 4, 5, 6, 7)}
	less := timeslice.Resources{sharedRes: sharedGPUs(4, 0, 1, 2, 3, 4, 5, 6)}
	e.update(b, full)
	p := e.kubelet.plugin(b, sharedRes, msgWait)
	p.next(b, msgWait)
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res := less
		if i%2 == 1 {
			res = full
		}
		t0 := time.Now()
		if err := e.m.Update(ctx, res); err != nil {
			b.Fatal(err)
		}
		m := p.next(b, msgWait)
		samples = append(samples, time.Since(t0))
		if want := len(res[sharedRes]); len(m.Devices) != want {
			b.Fatalf("got %d devices, want %d", len(m.Devices), want)
		}
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// BenchmarkWithdraw measures Withdraw of one GPU's replicas until it is
// confirmed (the stream's Send returned), Update restoring them between
// iterations outside the timing.
func BenchmarkWithdraw(b *testing.B) {
	e := newEnv(b, Options{}, false)
	full := timeslice.Resources{sharedRes: sharedGPUs(4, 0, 1, 2, 3, 4, 5, 6, 7)}
	e.update(b, full)
	p := e.kubelet.plugin(b, sharedRes, msgWait)
	p.next(b, msgWait)
	ctx := context.Background()
	ids := []string{"GPU-5"}
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := e.m.Withdraw(ctx, ids); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
		b.StopTimer()
		p.next(b, msgWait)
		if err := e.m.Update(ctx, full); err != nil {
			b.Fatal(err)
		}
		p.next(b, msgWait)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}
