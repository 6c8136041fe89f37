package sim

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/carve-dev/carve/partition"
)

func TestParseLatency(t *testing.T) {
	const forms = "want none, realistic, a duration (200ms) or op=duration pairs (create-gi=1s,reset-gpu=5s)"
	tests := []struct {
		in      string
		want    Latency
		wantErr string // "": no error
	}{
		{in: "", want: Latency{}},
		{in: "none", want: Latency{}},
		{in: "0s", want: Latency{}},
		{in: "realistic", want: RealisticLatency()},
		{in: "200ms", want: UniformLatency(200 * time.Millisecond)},
		{in: "1m30s", want: UniformLatency(90 * time.Second)},
		{in: "create-gi=1s,reset-gpu=5s", want: Latency{CreateGI: time.Second, ResetGPU: 5 * time.Second}},
		{in: " destroy-ci = 10ms , destroy-gi=20ms,create-ci=30ms,enable-mig=40ms,disable-mig=50ms ",
			want: Latency{DestroyCI: 10 * time.Millisecond, DestroyGI: 20 * time.Millisecond, CreateCI: 30 * time.Millisecond,
				EnableMIG: 40 * time.Millisecond, DisableMIG: 50 * time.Millisecond}},
		{in: "reset-gpu=0s", want: Latency{}},
		{in: "x", wantErr: `"x": ` + forms},
		{in: "Realistic", wantErr: `"Realistic": ` + forms},
		{in: "200", wantErr: `"200": ` + forms},
		{in: "-1s", wantErr: `"-1s": negative duration`},
		{in: "create-gi=1s,", wantErr: `"create-gi=1s,": "" is not op=duration (such as create-gi=1s)`},
		{in: "create-gi", wantErr: `"create-gi": ` + forms},
		{in: "=1s", wantErr: `"=1s": "=1s" is not op=duration (such as create-gi=1s)`},
		{in: "create-gi=", wantErr: `"create-gi=": "create-gi=" is not op=duration (such as create-gi=1s)`},
		{in: "mig-mode=1s", wantErr: `"mig-mode=1s": unknown operation "mig-mode" (want create-gi, destroy-gi, create-ci, destroy-ci, enable-mig, disable-mig or reset-gpu)`},
		{in: "create-gi=1s,create-gi=2s", wantErr: `"create-gi=1s,create-gi=2s": create-gi given twice`},
		{in: "reset-gpu=soon", wantErr: `"reset-gpu=soon": reset-gpu: "soon" is not a duration (such as 500ms)`},
		{in: "reset-gpu=-5s", wantErr: `"reset-gpu=-5s": reset-gpu: negative duration -5s`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLatency(tt.in)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("ParseLatency(%q) error (-want +got):\n%s", tt.in, diff)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseLatency(%q) (-want +got):\n%s", tt.in, diff)
			}
			// String gives a value that parses back to the same latency.
			again, err := ParseLatency(got.String())
			if err != nil || again != got {
				t.Errorf("ParseLatency(%q) = %+v, %v; want %+v back", got.String(), again, err, got)
			}
		})
	}
}

func TestLatencyString(t *testing.T) {
	tests := []struct {
		l    Latency
		want string
	}{
		{Latency{}, "none"},
		{RealisticLatency(), "realistic"},
		{UniformLatency(250 * time.Millisecond), "250ms"},
		{Latency{CreateGI: time.Second, ResetGPU: 5 * time.Second}, "create-gi=1s,reset-gpu=5s"},
	}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.l, got, tt.want)
		}
	}
}

func TestLatencyEstimate(t *testing.T) {
	ops := []partition.Op{
		{Kind: partition.OpEnableMIG}, {Kind: partition.OpResetGPU},
		{Kind: partition.OpCreateGI}, {Kind: partition.OpCreateCI},
		{Kind: partition.OpCreateGI}, {Kind: partition.OpCreateCI},
	}
	r := RealisticLatency()
	want := r.EnableMIG + r.ResetGPU + 2*r.CreateGI + 2*r.CreateCI
	if got := r.Estimate(ops); got != want {
		t.Errorf("Estimate = %s, want %s", got, want)
	}
	if got := (Latency{}).Estimate(ops); got != 0 {
		t.Errorf("no latency: Estimate = %s, want 0", got)
	}
	if got := r.For("frobnicate"); got != 0 {
		t.Errorf("For(unknown op) = %s, want 0", got)
	}
}

// sleepRecorder stands in for time.Sleep: it records the waits asked for
// and returns at once.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *sleepRecorder) sleep(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
}

func (r *sleepRecorder) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waits
	r.waits = nil
	return w
}

// latencyMachine returns an initialised one-H100 machine with latency l
// whose waits rec records.
func latencyMachine(t *testing.T, l Latency, rec *sleepRecorder) (*Machine, partition.Device) {
	t.Helper()
	m, err := New("h100-80gb*1")
	if err != nil {
		t.Fatal(err)
	}
	m.SetLatency(l)
	m.sleep = rec.sleep
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	d, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return m, d
}

// distinctLatency gives every operation its own duration, so the waits
// tell which operation asked for them.
var distinctLatency = Latency{
	CreateGI: 1 * time.Second, DestroyGI: 2 * time.Second, CreateCI: 3 * time.Second, DestroyCI: 4 * time.Second,
	EnableMIG: 5 * time.Second, DisableMIG: 6 * time.Second, ResetGPU: 7 * time.Second,
}

// each runs every kind of call on d, mutating and reading: MIG on, a GPU
// instance with its compute instance, reads, and back to MIG off.
func each(t *testing.T, d partition.Device) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("SetMIGMode(enabled)", d.SetMIGMode(partition.MIGEnabled))
	must("Reset", d.Reset())
	ps, err := d.GPUInstanceProfiles()
	must("GPUInstanceProfiles", err)
	p := ps[0]
	gi, err := d.CreateGPUInstance(p.ID, p.Placements[0])
	must("CreateGPUInstance", err)
	ci, err := d.CreateComputeInstance(gi.ID)
	must("CreateComputeInstance", err)
	_, err = d.GPUInstances()
	must("GPUInstances", err)
	_, err = d.ComputeInstances(gi.ID)
	must("ComputeInstances", err)
	_, _, err = d.MIGMode()
	must("MIGMode", err)
	_, err = d.UUID()
	must("UUID", err)
	_, err = d.Processes()
	must("Processes", err)
	must("DestroyComputeInstance", d.DestroyComputeInstance(gi.ID, ci.ID))
	must("DestroyGPUInstance", d.DestroyGPUInstance(gi.ID))
	must("SetMIGMode(disabled)", d.SetMIGMode(partition.MIGDisabled))
	must("Reset", d.Reset())
}

func TestLatencyMutatingCallsWait(t *testing.T) {
	rec := &sleepRecorder{}
	m, d := latencyMachine(t, distinctLatency, rec)
	each(t, d)
	l := distinctLatency
	want := []time.Duration{l.EnableMIG, l.ResetGPU, l.CreateGI, l.CreateCI, l.DestroyCI, l.DestroyGI, l.DisableMIG, l.ResetGPU}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if n := len(m.OpLog()); n != len(want) {
		t.Errorf("op log has %d ops, want %d", n, len(want))
	}
}

func TestLatencyNoneAddsNothing(t *testing.T) {
	for _, l := range []Latency{{}, mustParse(t, "none"), mustParse(t, "0s")} {
		rec := &sleepRecorder{}
		_, d := latencyMachine(t, l, rec)
		each(t, d)
		if got := rec.take(); len(got) != 0 {
			t.Errorf("latency %s: waits %v, want none", l, got)
		}
	}
}

func TestLatencyOnlyOpsThatTakeTime(t *testing.T) {
	rec := &sleepRecorder{}
	_, d := latencyMachine(t, mustParse(t, "reset-gpu=7s"), rec)
	each(t, d)
	if diff := cmp.Diff([]time.Duration{7 * time.Second, 7 * time.Second}, rec.take()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

func TestLatencyFailedCallsWaitUninitialisedDoNot(t *testing.T) {
	rec := &sleepRecorder{}
	m, d := latencyMachine(t, distinctLatency, rec)
	// A call the hardware refuses takes its time too.
	if err := m.InjectFault(Fault{Call: "CreateGPUInstance", GPU: 0, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateGPUInstance(19, partition.Placement{Start: 0, Size: 1}); !errors.Is(err, partition.ErrInsufficientResources) {
		t.Fatalf("CreateGPUInstance = %v, want the injected fault", err)
	}
	if diff := cmp.Diff([]time.Duration{distinctLatency.EnableMIG, distinctLatency.CreateGI}, rec.take()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	// The test API and calls before Init do not wait.
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); !errors.Is(err, partition.ErrUninitialized) {
		t.Fatalf("Reset before Init = %v, want ErrUninitialized", err)
	}
	if err := m.Reboot(); err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("waits %v, want none", got)
	}
}

func TestLatencyRealSleepTakesAtLeastTheLatency(t *testing.T) {
	m, err := New("h100-80gb*1")
	if err != nil {
		t.Fatal(err)
	}
	const d = 30 * time.Millisecond
	m.SetLatency(UniformLatency(d))
	if got := m.Latency(); got != UniformLatency(d) {
		t.Fatalf("Latency() = %s, want %s", got, d)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown() }()
	dev, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("SetMIGMode took %s, want at least %s", took, d)
	}
}

// gate is a sleep that blocks until released, telling when it started.
type gate struct {
	started chan time.Duration
	release map[time.Duration]chan struct{}
}

func newGate(ds ...time.Duration) *gate {
	g := &gate{started: make(chan time.Duration, len(ds)), release: map[time.Duration]chan struct{}{}}
	for _, d := range ds {
		g.release[d] = make(chan struct{})
	}
	return g
}

func (g *gate) sleep(d time.Duration) {
	g.started <- d
	<-g.release[d]
}

// waitFor fails the test when ch yields nothing for long: the sign of a
// deadlock, not a timing requirement.
func waitFor[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing after 30s (blocked?)", what)
		var zero T
		return zero
	}
}

func TestLatencyReadsGoOnDuringAWait(t *testing.T) {
	m, err := New("h100-80gb*1")
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(time.Hour)
	m.SetLatency(Latency{ResetGPU: time.Hour})
	m.sleep = g.sleep
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown() }()
	d, err := m.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- d.Reset() }()
	waitFor(t, "reset waiting", g.started)

	// While the reset waits, reads answer, and from the state before it.
	readDone := make(chan partition.MIGMode, 1)
	go func() {
		cur, _, err := d.MIGMode()
		if err != nil {
			t.Error(err)
		}
		_, _ = m.DeviceCount()
		_ = m.OpLog()
		readDone <- cur
	}()
	if cur := waitFor(t, "read during the reset", readDone); cur != partition.MIGDisabled {
		t.Errorf("during the reset MIG mode is %s, want disabled (the reset has not happened yet)", cur)
	}
	close(g.release[time.Hour])
	if err := waitFor(t, "reset", resetDone); err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := d.MIGMode(); cur != partition.MIGEnabled {
		t.Errorf("after the reset MIG mode is %s, want enabled", cur)
	}
}

func TestLatencyOpLogInTheOrderCallsTakeEffect(t *testing.T) {
	m, err := New("h100-80gb*2")
	if err != nil {
		t.Fatal(err)
	}
	// GPU 0's reset waits longer than GPU 1's and finishes last.
	long, short := 2*time.Hour, time.Hour
	g := newGate(long, short)
	m.SetLatency(Latency{ResetGPU: long, DisableMIG: short})
	m.sleep = g.sleep
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown() }()
	d0, _ := m.Device(0)
	d1, _ := m.Device(1)
	errs := make(chan error, 2)
	go func() { errs <- d0.Reset() }()
	waitFor(t, "GPU 0 waiting", g.started)
	go func() { errs <- d1.SetMIGMode(partition.MIGDisabled) }()
	waitFor(t, "GPU 1 waiting", g.started)
	close(g.release[short])
	if err := waitFor(t, "GPU 1", errs); err != nil {
		t.Fatal(err)
	}
	close(g.release[long])
	if err := waitFor(t, "GPU 0", errs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range m.OpLog() {
		got = append(got, op.String())
	}
	want := []string{"GPU 1 SetMIGMode(disabled) = current disabled, pending disabled", "GPU 0 Reset() = MIG disabled"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("op log (-want +got):\n%s", diff)
	}
}

func mustParse(t *testing.T, s string) Latency {
	t.Helper()
	l, err := ParseLatency(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
