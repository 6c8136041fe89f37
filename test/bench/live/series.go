package live

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// side is how a change reaches the kubelet: live (the agent keeps
// running) or by restart (the baseline).
type side int

const (
	live side = iota
	restart
)

func (s side) String() string {
	if s == restart {
		return "restart"
	}
	return "live"
}

// sideOf is the side of the i-th change of a series: live, restart,
// restart, live, ... so that each side makes as many changes in each
// direction (a -> b on even i, b -> a on odd i).
func sideOf(i int) side {
	if i%4 == 1 || i%4 == 2 {
		return restart
	}
	return live
}

// sample is one change as measured.
type sample struct {
	side side
	// devices and alloc are the times from the write to the kubelet's
	// device set and to the Node's allocatable.
	devices, alloc time.Duration
	// stop is how long the old process took to exit (restart only).
	stop time.Duration
	// cost is the agent's requests for the change.
	cost requests
	// pidBefore and pidAfter are the agent's process before and after.
	pidBefore, pidAfter int
}

// series is the changes of one kind by one trigger.
type series struct {
	kind    string
	trigger trigger
	samples []sample
}

// runSeries makes 2n changes of kind k by trigger tr, alternating between
// the two sides, starting from k.a (reached first, untimed).
func (b *bench) runSeries(ctx context.Context, k kind, tr trigger, n int) (series, error) {
	s := series{kind: k.name, trigger: tr}
	from, err := targetFor(k, k.a, tr)
	if err != nil {
		return s, err
	}
	if err := b.reach(ctx, from); err != nil {
		return s, fmt.Errorf("%s by %s: reach %s: %w", k.name, tr, k.a.name, err)
	}
	t0 := time.Now()
	defer func() {
		b.logf("%s by %s: %d changes in %s", k.name, tr, len(s.samples), time.Since(t0).Round(time.Second))
	}()
	for i := range 2 * n {
		p := k.b
		if i%2 == 1 {
			p = k.a
		}
		to, err := targetFor(k, p, tr)
		if err != nil {
			return s, err
		}
		smp, err := b.change(ctx, tr, to, sideOf(i))
		if err != nil {
			return s, fmt.Errorf("%s by %s, change %d (%s, to %s): %w", k.name, tr, i+1, sideOf(i), p.name, err)
		}
		s.samples = append(s.samples, smp)
		b.logf("  %s by %s, %s to %s: devices %s, allocatable %s, requests %.0f read %.0f write",
			k.name, tr, smp.side, p.name, smp.devices.Round(time.Millisecond), smp.alloc.Round(time.Millisecond), smp.cost.reads, smp.cost.writes)
	}
	return s, nil
}

// write makes the change's one API write: the node label, or the
// ConfigMap.
func (b *bench) write(ctx context.Context, tr trigger, t target) error {
	if tr == byLabel {
		return harness.SetNodeLabels(ctx, b.cs, b.node, map[string]string{carvev1.LabelProfile: t.label})
	}
	return harness.ApplyProfiles(ctx, b.cs, namespace, configMapName, t.file)
}

// reach brings the node to t without timing it: the file and the label as
// t has them, then until the agent, the kubelet and the Node show it.
func (b *bench) reach(ctx context.Context, t target) error {
	if err := harness.ApplyProfiles(ctx, b.cs, namespace, configMapName, t.file); err != nil {
		return err
	}
	if err := harness.SetNodeLabels(ctx, b.cs, b.node, map[string]string{carvev1.LabelProfile: t.label}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := b.view.waitRecord(ctx, t.label, t.hash); err != nil {
		return fmt.Errorf("%w\nagent log:\n%s", err, b.runner.tail())
	}
	if _, _, err := b.kubelet.waitDevices(ctx, t.counts); err != nil {
		return err
	}
	if _, err := b.view.waitAllocatable(ctx, t.counts); err != nil {
		return err
	}
	return b.quiet(ctx)
}

// quiet waits for the agent's last requests of a change (Events are sent
// by a goroutine of their own) and takes the request counts.
func (b *bench) quiet(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(quietFor):
	}
	var err error
	b.counts, err = countRequests(ctx, b.cs)
	return err
}

// quietFor is how long after a change's record the agent is left before
// its requests are counted.
const quietFor = 300 * time.Millisecond

// kubeletStatusPeriod is how often the local cluster's kubelet updates its
// node status (nodeStatusUpdateFrequency, test/cluster/config.go).
const kubeletStatusPeriod = 2 * time.Second

// change makes one change to t by trigger tr on side sd and times it. It
// first waits a random part of the kubelet's status period: the loop would
// otherwise lock onto that period (each change taking one period), and the
// allocatable end point would measure the loop's phase.
func (b *bench) change(ctx context.Context, tr trigger, t target, sd side) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-ctx.Done():
		return sample{}, ctx.Err()
	case <-time.After(rand.N(kubeletStatusPeriod)):
	}
	smp := sample{side: sd, pidBefore: b.proc.PID()}
	before := b.counts
	t0 := time.Now()
	// The two end points are watched from the write on.
	devc := make(chan endPoint, 1)
	go func() {
		at, set, err := b.kubelet.waitDevices(ctx, t.counts)
		devc <- endPoint{at: at, set: set, err: err}
	}()
	if err := b.makeChange(ctx, tr, t, sd, &smp); err != nil {
		return smp, err
	}
	allocAt, err := b.view.waitAllocatable(ctx, t.counts)
	if err != nil {
		return smp, fmt.Errorf("%w\nagent log:\n%s", err, b.runner.tail())
	}
	dev := <-devc
	if dev.err != nil {
		return smp, fmt.Errorf("%w\nagent log:\n%s", dev.err, b.runner.tail())
	}
	smp.devices, smp.alloc, smp.pidAfter = dev.at.Sub(t0), allocAt.Sub(t0), b.proc.PID()
	if err := b.verify(ctx, t, dev.set); err != nil {
		return smp, err
	}
	if err := b.quiet(ctx); err != nil {
		return smp, err
	}
	smp.cost = b.counts.minus(before)
	return smp, nil
}

// endPoint is when the kubelet first had the new devices, and which.
type endPoint struct {
	at  time.Time
	set deviceSet
	err error
}

// makeChange makes the write; on the restart side it sends the agent
// SIGTERM first (so that it cannot act on the write itself, as NVIDIA's
// device plugin, which does not watch its configuration, would not), waits
// for it to exit, and starts it again.
func (b *bench) makeChange(ctx context.Context, tr trigger, t target, sd side, smp *sample) error {
	if sd == live {
		return b.write(ctx, tr, t)
	}
	t0 := time.Now()
	if err := b.proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := b.write(ctx, tr, t); err != nil {
		return err
	}
	if err := waitExit(b.proc, 30*time.Second); err != nil {
		return fmt.Errorf("%w\nagent log:\n%s", err, b.runner.tail())
	}
	smp.stop = time.Since(t0)
	return b.startAgent()
}

// verify checks that the change is over as timed: the agent's record says
// the target is realised, and the kubelet's devices are still the set the
// time was taken at (so it was the final set, not one on the way).
func (b *bench) verify(ctx context.Context, t target, timed deviceSet) error {
	if err := b.view.waitRecord(ctx, t.label, t.hash); err != nil {
		return fmt.Errorf("%w\nagent log:\n%s", err, b.runner.tail())
	}
	now, err := b.kubelet.devices(ctx)
	if err != nil {
		return err
	}
	if !now.equal(timed) {
		return fmt.Errorf("the kubelet's devices changed after they were timed: %v then %v", timed.counts(), now.counts())
	}
	return nil
}
