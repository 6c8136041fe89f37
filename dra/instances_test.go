package dra

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/kubeclient/clientset"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/xidhealth"
)

// dynamicNode is a simulated node of two H100s, GPU 1 dynamic (MIG on,
// empty), served by a driver with state in state; objs are the API's
// claims.
func dynamicNode(t *testing.T, m *sim.Machine, state string, objs ...*resourceapi.ResourceClaim) *Driver {
	t.Helper()
	cs := newFake()
	for _, c := range objs {
		if err := cs.Tracker().Add(c); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(Config{Client: clientset.Wrap(cs), NodeName: node, StateDir: state, CDIDir: t.TempDir(), GPUs: m,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	d.SetDynamic([]DynamicGPU{{Index: 1, UUID: gpus[1].UUID, Model: model(t, "H100-80GB")}})
	if err := d.Advertise(context.Background(), gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	return d
}

// dynamicMachine is two simulated H100s, GPU 1 in MIG mode with no
// instance.
func dynamicMachine(t *testing.T) *sim.Machine {
	t.Helper()
	m, _ := simGPUs(t, "h100-80gb*2")
	dev, err := m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.SetMIGMode(partition.MIGEnabled); err != nil {
		t.Fatal(err)
	}
	if err := dev.Reset(); err != nil {
		t.Fatal(err)
	}
	m.ResetOpLog()
	return m
}

// instancesOn lists GPU 1's instances as "profile@placement uuid".
func instancesOn(t *testing.T, m *sim.Machine) map[string]string {
	t.Helper()
	dev, err := m.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := partition.ReadGPU(dev)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, in := range g.Instances {
		out[in.Profile+"@"+in.Placement.String()] = in.UUID()
	}
	return out
}

// TestPrepareMakesDynamicDevices: claims allocated a 3g.40gb at 4:4 and a
// 1g.10gb at 0:1 of a dynamic GPU get exactly those MIG devices, made at
// prepare with their compute instances, named in each claim's CDI spec;
// unprepare destroys them; a second prepare of a prepared claim makes
// nothing.
func TestPrepareMakesDynamicDevices(t *testing.T) {
	m := dynamicMachine(t)
	d := dynamicNode(t, m, t.TempDir())
	ctx := context.Background()
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{
		claim("c1", "big", "gpu-1-dyn-3g40gb-4"), claim("c2", "small", "gpu-1-dyn-1g10gb-0"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for uid, r := range res {
		if r.Err != nil {
			t.Fatalf("claim %s: %v", uid, r.Err)
		}
	}
	made := instancesOn(t, m)
	if len(made) != 2 || made["3g.40gb@4:4"] == "" || made["1g.10gb@0:1"] == "" {
		t.Fatalf("GPU 1 holds %v, want a complete 3g.40gb at 4:4 and 1g.10gb at 0:1", made)
	}
	spec, err := os.ReadFile(d.claims.rec.Claims["c1"].CDISpec)
	if err != nil || !strings.Contains(string(spec), made["3g.40gb@4:4"]) || strings.Contains(string(spec), made["1g.10gb@0:1"]) {
		t.Errorf("claim c1's CDI spec (%v) must name its MIG device %s and not the other:\n%s", err, made["3g.40gb@4:4"], spec)
	}
	if got := d.claims.rec.Instances["gpu-1-dyn-3g40gb-4"]; got.State != carvev1.InstanceMade || got.Claim != "c1" || got.UUID != made["3g.40gb@4:4"] {
		t.Errorf("record of the 3g.40gb: %+v", got)
	}
	ops := len(m.OpLog())
	if _, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "big", "gpu-1-dyn-3g40gb-4")}); err != nil {
		t.Fatal(err)
	}
	if len(m.OpLog()) != ops {
		t.Errorf("a second prepare of a prepared claim touched the GPU: %v", m.OpLog()[ops:])
	}

	un, err := d.UnprepareResourceClaims(ctx, []ClaimRef{{Namespace: "ns", Name: "big", UID: "c1"}})
	if err != nil || un["c1"] != nil {
		t.Fatalf("unprepare: %v %v", err, un)
	}
	if diff := cmp.Diff(map[string]string{"1g.10gb@0:1": made["1g.10gb@0:1"]}, instancesOn(t, m)); diff != "" {
		t.Errorf("after unprepare of c1 (-want +got):\n%s", diff)
	}
	if _, ok := d.claims.rec.Instances["gpu-1-dyn-3g40gb-4"]; ok {
		t.Error("the 3g.40gb is still recorded after its claim was unprepared")
	}
}

// TestPrepareResumesAfterACrash: a driver killed after each operation of a
// prepare (the record written first, then create-gi, then create-ci)
// converges when a new one prepares the claim again: one GPU instance at
// the placement, never a second create, and the claim gets the device.
func TestPrepareResumesAfterACrash(t *testing.T) {
	for crashAfter := 1; crashAfter <= 2; crashAfter++ {
		m := dynamicMachine(t)
		state := t.TempDir()
		d := dynamicNode(t, m, state)
		// The crash: the faults stop the make at this op, as a kill would;
		// the record keeps it as being made.
		calls := []string{"CreateGPUInstance", "CreateComputeInstance"}
		if crashAfter < 2 {
			if err := m.InjectFault(sim.Fault{Call: calls[crashAfter], GPU: 1, Err: errors.New("killed"), Times: 1}); err != nil {
				t.Fatal(err)
			}
		}
		name := "gpu-1-dyn-3g40gb-4"
		dd := d.offer.Dynamic[name]
		d.mu.Lock()
		_, err := d.makeInstance(context.Background(), "c1", name, dd)
		d.mu.Unlock()
		if crashAfter < 2 && err == nil {
			t.Fatalf("crash after op %d: the make did not stop", crashAfter)
		}
		if crashAfter < 2 {
			// A killed agent undoes nothing: put the record back as the
			// crash left it, with the GPU instance made.
			m.ClearFaults()
			dev, _ := m.Device(1)
			if _, err := dev.CreateGPUInstance(dd.Profile.ID, dd.At); err != nil {
				t.Fatal(err)
			}
			rec := carvev1.ClaimInstance{Claim: "c1", GPU: dd.GPUUUID, GPUIndex: 1, Profile: dd.Profile.Name, ProfileID: dd.Profile.ID,
				Placement: carvev1.Placement{Start: 4, Size: 4}, State: carvev1.InstanceMaking}
			d.claims.rec.Instances = map[string]carvev1.ClaimInstance{name: rec}
			if err := d.claims.save(); err != nil {
				t.Fatal(err)
			}
		}
		if crashAfter == 2 {
			// Killed after the last op, before the record said made.
			rec := d.claims.rec.Instances[name]
			rec.State, rec.UUID = carvev1.InstanceMaking, ""
			d.claims.rec.Instances[name] = rec
			if err := d.claims.save(); err != nil {
				t.Fatal(err)
			}
		}
		m.ResetOpLog()
		again := dynamicNode(t, m, state, claim("c1", "big", name))
		res, err := again.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("c1", "big", name)})
		if err != nil || res["c1"].Err != nil {
			t.Fatalf("crash after op %d: prepare again: %v %v", crashAfter, err, res["c1"].Err)
		}
		var creates []string
		for _, op := range m.OpLog() {
			if strings.HasPrefix(op.Call, "Create") {
				creates = append(creates, op.Call)
			}
		}
		want := map[int][]string{1: {"CreateComputeInstance"}, 2: nil}[crashAfter]
		if diff := cmp.Diff(want, creates); diff != "" {
			t.Errorf("crash after op %d: creates after the restart (-want +got):\n%s", crashAfter, diff)
		}
		if got := instancesOn(t, m); len(got) != 1 || got["3g.40gb@4:4"] == "" {
			t.Errorf("crash after op %d: GPU 1 holds %v", crashAfter, got)
		}
	}
}

// TestSweepDestroysOrphans: after a restart the driver keeps the devices
// of prepared claims and of claims the API server still allocates them
// to, destroys one made for a claim that is gone, and leaves alone an
// instance it did not make for a claim.
func TestSweepDestroysOrphans(t *testing.T) {
	m := dynamicMachine(t)
	state := t.TempDir()
	d := dynamicNode(t, m, state)
	ctx := context.Background()
	for _, c := range []*resourceapi.ResourceClaim{claim("kept", "kept", "gpu-1-dyn-1g10gb-0"), claim("gone", "gone", "gpu-1-dyn-1g10gb-1")} {
		if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
			t.Fatal(err, res[c.UID].Err)
		}
	}
	// The claim "gone" was prepared by a run whose record the restart
	// finds only its device of: forget the claim, keep the device.
	delete(d.claims.rec.Claims, "gone")
	if err := d.claims.save(); err != nil {
		t.Fatal(err)
	}
	dev, _ := m.Device(1)
	h100 := model(t, "H100-80GB")
	p, _ := h100.Profile("3g.40gb")
	if _, err := dev.CreateGPUInstance(p.ID, partition.Placement{Start: 4, Size: 4}); err != nil {
		t.Fatal(err)
	}
	again := dynamicNode(t, m, state, claim("kept", "kept", "gpu-1-dyn-1g10gb-0"))
	again.sweepInstances(ctx)
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range instancesOn(t, m) {
			if !yield(k) {
				return
			}
		}
	})
	if diff := cmp.Diff([]string{"1g.10gb@0:1", "3g.40gb@4:4"}, got); diff != "" {
		t.Errorf("after the sweep GPU 1 holds (-want +got):\n%s", diff)
	}
}

// TestRefusedMakeTaintsTheDevice: a device the GPU refuses to make fails
// its claim with the GPU's reason, is undone and tainted not-made at once;
// a fresh read that finds the placement free clears the taint, once it has
// held a while.
func TestRefusedMakeTaintsTheDevice(t *testing.T) {
	m := dynamicMachine(t)
	d := dynamicNode(t, m, t.TempDir())
	ctx := context.Background()
	if err := m.InjectFault(sim.Fault{Call: "CreateComputeInstance", GPU: 1, Err: partition.ErrInsufficientResources, Times: 1}); err != nil {
		t.Fatal(err)
	}
	name := "gpu-1-dyn-2g20gb-2"
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "c1", name)})
	if err != nil {
		t.Fatal(err)
	}
	if err := res["c1"].Err; err == nil || !strings.Contains(err.Error(), "make "+name) {
		t.Fatalf("prepare = %v, want the make's failure", err)
	}
	if got := instancesOn(t, m); len(got) != 0 {
		t.Errorf("a refused make left %v", got)
	}
	taint := func() string {
		for _, dev := range d.published {
			if dev.Name != name {
				continue
			}
			for _, tt := range dev.Taints {
				if tt.Key == TaintUnavailable {
					return tt.Value + ":" + string(tt.Effect)
				}
			}
		}
		return ""
	}
	if got := taint(); got != "not-made:NoSchedule" {
		t.Errorf("taint published after the refusal %q, want not-made:NoSchedule", got)
	}
	republish := func() {
		t.Helper()
		d.sweepInstances(ctx)
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := d.publishLocked(ctx); err != nil {
			t.Fatal(err)
		}
	}
	republish()
	if got := taint(); got != "not-made:NoSchedule" {
		t.Errorf("taint right after the refusal, the placement free: %q, want it kept for %s", got, unavailableHold)
	}
	d.mu.Lock()
	mark := d.unavailable[name]
	mark.since = mark.since.Add(-unavailableHold)
	d.unavailable[name] = mark
	d.mu.Unlock()
	republish()
	if got := taint(); got != "" {
		t.Errorf("taint %s later, a fresh read finding the placement free: %q", unavailableHold, got)
	}
}

// TestChangingGPUTainted: the devices of a GPU marked changing carry the
// unavailable taint (changing, NoSchedule) from the next publish until the
// mark is cleared; the other GPU's do not.
func TestChangingGPUTainted(t *testing.T) {
	m, gpus := simGPUs(t, "h100-80gb*2")
	d, err := New(Config{Client: clientset.Wrap(newFake()), NodeName: node, CDIDir: t.TempDir(), GPUs: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tainted := func() []string {
		var out []string
		for _, dev := range d.published {
			for _, tt := range dev.Taints {
				if tt.Key == TaintUnavailable && tt.Value == "changing" && tt.Effect == resourceapi.DeviceTaintEffectNoSchedule {
					out = append(out, dev.Name)
				}
			}
		}
		return out
	}
	d.SetChanging([]string{gpus[1].UUID})
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-1"}, tainted()); diff != "" {
		t.Errorf("tainted while GPU 1 changes (-want +got):\n%s", diff)
	}
	d.SetChanging(nil)
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	if got := tainted(); len(got) != 0 {
		t.Errorf("tainted once the change is over: %v", got)
	}
}

// TestSweepAtRestAsksNothing: with every recorded device made for a claim
// prepared here, the sweep does not list the cluster's claims.
func TestSweepAtRestAsksNothing(t *testing.T) {
	m := dynamicMachine(t)
	cs := newFake()
	d, err := New(Config{Client: clientset.Wrap(cs), NodeName: node, CDIDir: t.TempDir(), GPUs: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	d.SetDynamic([]DynamicGPU{{Index: 1, UUID: gpus[1].UUID, Model: model(t, "H100-80GB")}})
	ctx := context.Background()
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "c1", "gpu-1-dyn-1g10gb-0")}); err != nil || res["c1"].Err != nil {
		t.Fatal(err, res["c1"].Err)
	}
	cs.ClearActions()
	d.sweepInstances(ctx)
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "resourceclaims" {
			t.Errorf("the sweep at rest listed claims: %v", a)
		}
	}
	if got := instancesOn(t, m); len(got) != 1 {
		t.Errorf("the sweep at rest changed GPU 1: %v", got)
	}
}

// TestPrepareNeverTakesOverAStrayInstance: an instance carve did not make
// for a claim, at or across the allocated placement, fails the prepare and
// is neither taken over nor destroyed.
func TestPrepareNeverTakesOverAStrayInstance(t *testing.T) {
	for _, at := range []partition.Placement{{Start: 4, Size: 4}, {Start: 6, Size: 1}} {
		m := dynamicMachine(t)
		d := dynamicNode(t, m, t.TempDir())
		h100 := model(t, "H100-80GB")
		p, _ := h100.Profile("3g.40gb")
		if at.Size == 1 {
			p, _ = h100.Profile("1g.10gb")
		}
		dev, _ := m.Device(1)
		gi, err := dev.CreateGPUInstance(p.ID, at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dev.CreateComputeInstance(gi.ID); err != nil {
			t.Fatal(err)
		}
		before := instancesOn(t, m)
		res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("c1", "c1", "gpu-1-dyn-3g40gb-4")})
		if err != nil {
			t.Fatal(err)
		}
		if err := res["c1"].Err; err == nil || !strings.Contains(err.Error(), "not made for a claim") {
			t.Errorf("stray %s at %s: prepare = %v, want a refusal naming it", p.Name, at, err)
		}
		if diff := cmp.Diff(before, instancesOn(t, m)); diff != "" {
			t.Errorf("stray %s at %s: GPU 1 changed (-before +after):\n%s", p.Name, at, diff)
		}
		if len(d.claims.rec.Instances) != 0 {
			t.Errorf("stray %s at %s: recorded %v", p.Name, at, d.claims.rec.Instances)
		}
	}
}

// TestXIDOnAMadeDevice: an XID NVML pins to the MIG device made for a
// claim shows on the dynamic device it was made as: tainted in the slice
// and unhealthy to the kubelet.
func TestXIDOnAMadeDevice(t *testing.T) {
	m := dynamicMachine(t)
	cs := newFake()
	d, err := New(Config{Client: clientset.Wrap(cs), NodeName: node, CDIDir: t.TempDir(), GPUs: m, Logger: slog.New(slog.DiscardHandler),
		Health: xidhealth.Options{Poll: 10 * time.Millisecond, BootID: func() (string, error) { return "b", nil }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go d.health.Run(ctx)
	gpus, err := partition.ReadInventory(m)
	if err != nil {
		t.Fatal(err)
	}
	d.SetDynamic([]DynamicGPU{{Index: 1, UUID: gpus[1].UUID, Model: model(t, "H100-80GB")}})
	if err := d.Advertise(ctx, gpus, expand(t, gpus, nil)); err != nil {
		t.Fatal(err)
	}
	name := "gpu-1-dyn-3g40gb-4"
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("c1", "c1", name)}); err != nil || res["c1"].Err != nil {
		t.Fatal(err, res["c1"].Err)
	}
	dev, _ := m.Device(1)
	g, err := partition.ReadGPU(dev)
	if err != nil || len(g.Instances) != 1 {
		t.Fatalf("GPU 1: %+v %v", g.Instances, err)
	}
	if err := m.RaiseXID(1, 94, g.Instances[0].GIID, g.Instances[0].CIs[0].ID); err != nil {
		t.Fatal(err)
	}
	health := func() string {
		for _, dh := range d.healthReport().GetDevices() {
			if dh.GetDevice().GetDeviceName() == name {
				return dh.GetHealth().String()
			}
		}
		return "absent"
	}
	deadline := time.Now().Add(10 * time.Second)
	for health() != "UNHEALTHY" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := health(); got != "UNHEALTHY" {
		t.Fatalf("health of %s after an XID on its MIG device: %s", name, got)
	}
	d.mu.Lock()
	published := d.published
	d.mu.Unlock()
	for _, pd := range published {
		if pd.Name == name && !slices.ContainsFunc(pd.Taints, func(tt resourceapi.DeviceTaint) bool { return tt.Key == TaintXID && tt.Value == "94" }) {
			t.Errorf("%s published without the XID taint: %+v", name, pd.Taints)
		}
	}
}
