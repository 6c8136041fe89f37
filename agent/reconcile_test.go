package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// fakeInUse is the kubelet's PodResources answer: the devices tests mark
// busy.
type fakeInUse struct {
	mu    sync.Mutex
	held  map[string]plugin.Assignment
	calls int
	err   error
}

func (f *fakeInUse) hold(uuid, pod string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = map[string]plugin.Assignment{}
	}
	f.held[uuid] = plugin.Assignment{Namespace: "default", Pod: pod, Container: "main", DeviceIDs: []string{uuid}, UUIDs: []string{uuid}}
}

func (f *fakeInUse) release(uuid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.held, uuid)
}

func (f *fakeInUse) InUse(context.Context) (*plugin.InUse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out := &plugin.InUse{Assignments: []plugin.Assignment{}, UUIDs: []string{}}
	for uuid, a := range f.held {
		out.UUIDs = append(out.UUIDs, uuid)
		out.Assignments = append(out.Assignments, a)
	}
	sort.Strings(out.UUIDs)
	sort.Slice(out.Assignments, func(i, j int) bool { return out.Assignments[i].Pod < out.Assignments[j].Pod })
	return out, nil
}

// fakeAdvertiser records what the reconciler advertises and withdraws.
type fakeAdvertiser struct {
	mu         sync.Mutex
	current    timeslice.Resources
	updates    int
	withdrawn  [][]string
	onWithdraw func(ids []string)
	updateErr  error
}

func (f *fakeAdvertiser) Update(_ context.Context, res timeslice.Resources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	if f.updateErr != nil {
		return f.updateErr
	}
	f.current = res
	return nil
}

func (f *fakeAdvertiser) Withdraw(_ context.Context, ids []string) error {
	f.mu.Lock()
	f.withdrawn = append(f.withdrawn, slices.Clone(ids))
	hook := f.onWithdraw
	f.mu.Unlock()
	if hook != nil {
		hook(ids)
	}
	return nil
}

func (f *fakeAdvertiser) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current.Counts()
}

// harness runs reconciles on a simulated machine as the Kubernetes side
// will: it keeps the node's labels and annotation between reconciles.
type harness struct {
	t      testing.TB
	m      *sim.Machine
	inUse  *fakeInUse
	adv    *fakeAdvertiser
	r      *Reconciler
	dir    string
	now    time.Time
	labels map[string]string
	prev   *carvev1.NodeRecord
	// changes are the records the RecordChange hook wrote (before a
	// change's first disruptive step); recordErr makes it fail.
	changes   []carvev1.NodeRecord
	recordErr error
}

const testProfiles = `version: v1
defaultProfile: full
profiles:
  full:
    - gpus: all
  shared-2:
    - gpus: all
      timeSlicing: {replicas: 2}
  shared-4:
    - gpus: all
      timeSlicing: {replicas: 4}
  balanced:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing:
        replicas: {1g.10gb: 2}
  balanced-3:
    - gpus: all
      mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
      timeSlicing:
        replicas: {1g.10gb: 3}
  small:
    - gpus: all
      mig: {1g.10gb: 7}
  half:
    - gpus: all
      mig: {3g.40gb: 1}
  half-plus:
    - gpus: all
      mig: {3g.40gb: 1, 1g.10gb: 3}
`

func newHarness(t testing.TB, spec string) *harness {
	t.Helper()
	m, err := sim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	h := &harness{
		t: t, m: m, inUse: &fakeInUse{}, adv: &fakeAdvertiser{},
		dir:    t.TempDir(),
		now:    time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), // a Monday
		labels: map[string]string{"kubernetes.io/hostname": "node-1"},
	}
	h.r = h.newReconciler()
	return h
}

// newReconciler is a reconciler as a freshly started agent has it.
func (h *harness) newReconciler() *Reconciler {
	return &Reconciler{Lib: h.m, InUse: h.inUse, Devices: h.adv, Checkpoints: &Checkpoints{Dir: h.dir}, DrainRetry: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Hooks: Hooks{RecordChange: h.recordChange}}
}

// recordChange is the RecordChange hook as the Controller's: the record
// becomes the node's.
func (h *harness) recordChange(_ context.Context, rec carvev1.NodeRecord) error {
	if h.recordErr != nil {
		return h.recordErr
	}
	h.changes = append(h.changes, rec)
	h.prev = &rec
	return nil
}

func (h *harness) parse(yaml string) *configs.File {
	h.t.Helper()
	f, err := configs.Parse([]byte(yaml))
	if err != nil {
		h.t.Fatalf("parse test profiles: %v", err)
	}
	return f
}

// reconcile runs one reconcile with the profile pinned by label (or none)
// and records the result on the harness's node.
func (h *harness) reconcile(f *configs.File, cfgErr error, profile string) Result {
	h.t.Helper()
	if profile == "" {
		delete(h.labels, carvev1.LabelProfile)
	} else {
		h.labels[carvev1.LabelProfile] = profile
	}
	res, err := h.r.Reconcile(context.Background(), Input{Config: f, ConfigErr: cfgErr, Labels: h.labels, Now: h.now, Previous: h.prev})
	if err != nil {
		h.t.Fatalf("Reconcile: %v", err)
	}
	h.record(res)
	return res
}

// record applies the result's labels and annotation as the Kubernetes side
// will, through MetadataPatch's semantics: a label carve owns by the
// record the node carried goes when the result lacks it.
func (h *harness) record(res Result) {
	h.t.Helper()
	for k := range h.labels {
		if carvev1.Owns(h.prev, k) {
			if _, keep := res.Labels[k]; !keep {
				delete(h.labels, k)
			}
		}
	}
	maps.Copy(h.labels, res.Labels)
	a := res.Annotation
	h.prev = &a
	if res.ReleaseSlot {
		h.r.ReleaseSlot(context.Background())
	}
}

func (h *harness) gpus() []partition.GPU {
	h.t.Helper()
	gpus, err := partition.ReadInventory(h.m)
	if err != nil {
		h.t.Fatal(err)
	}
	return gpus
}

// layout describes the MIG instances of every GPU, e.g.
// "0:[1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4] 1:whole".
func layout(gpus []partition.GPU) string {
	var parts []string
	for _, g := range gpus {
		if g.MIGMode != partition.MIGEnabled {
			parts = append(parts, fmt.Sprintf("%d:whole", g.Index))
			continue
		}
		var ins []string
		for _, in := range g.Instances {
			mark := ""
			if !in.Complete() {
				mark = "!"
			}
			ins = append(ins, fmt.Sprintf("%s@%d%s", in.Profile, in.Placement.Start, mark))
		}
		parts = append(parts, fmt.Sprintf("%d:[%s]", g.Index, strings.Join(ins, " ")))
	}
	return strings.Join(parts, " ")
}

func (h *harness) mutations() []sim.Op { return h.m.OpLog() }

func reasons(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func hasEvent(evs []Event, reason string, warning bool) bool {
	for _, e := range evs {
		if e.Reason == reason && e.Warning == warning {
			return true
		}
	}
	return false
}

// migUUID returns the MIG device UUID of the instance of profile on GPU gpu.
func (h *harness) migUUID(gpu int, profile string) string {
	h.t.Helper()
	for _, g := range h.gpus() {
		if g.Index != gpu {
			continue
		}
		for _, in := range g.Instances {
			if in.Profile == profile && in.Complete() {
				return in.UUID()
			}
		}
	}
	h.t.Fatalf("GPU %d has no %s instance", gpu, profile)
	return ""
}

// h100Labels are the node labels of GPU feature discovery's that carve
// writes for two H100 80GB GPUs, whatever their layout.
func h100Labels() map[string]string {
	return map[string]string{
		carvev1.LabelGPUCount: "2", carvev1.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", carvev1.LabelGPUMemory: "81559",
		carvev1.LabelMIGCapable: "true", carvev1.LabelMIGStrategy: "mixed",
	}
}

// h100MIGLabels are the labels of count MIG devices of an H100 80GB's
// profile, each shared by replicas: memory in MiB, streaming
// multiprocessors, compute slices (GPU and compute instance), and engines
// copy, decoder and JPEG each (no encoder, no optical flow).
func h100MIGLabels(profile string, count, replicas int, memory, sms, slices, engines string) map[string]string {
	product, sharing := "NVIDIA-H100-80GB-HBM3-MIG-"+profile, "none"
	if replicas > 1 {
		product, sharing = product+"-SHARED", "time-slicing"
	}
	k := func(suffix string) string { return "nvidia.com/mig-" + profile + suffix }
	return map[string]string{
		k(".count"): fmt.Sprint(count), k(".replicas"): fmt.Sprint(replicas), k(".sharing-strategy"): sharing, k(".product"): product,
		k(".memory"): memory, k(".multiprocessors"): sms, k(".slices.gi"): slices, k(".slices.ci"): slices,
		k(".engines.copy"): engines, k(".engines.decoder"): engines, k(".engines.jpeg"): engines, k(".engines.encoder"): "0", k(".engines.ofa"): "0",
	}
}

// merge returns the union of label maps.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// TestReconcileAppliesProfiles applies the default and a labelled MIG
// profile to two H100s, and checks the layout, what is advertised, the
// whole label map the agent writes (carve's and GPU feature discovery's),
// the node record and that no checkpoint is left.
func TestReconcileAppliesProfiles(t *testing.T) {
	tests := []struct {
		name       string
		profile    string
		wantLayout string
		wantRes    map[string]int
		wantLabels map[string]string
	}{
		{
			name: "default: whole GPUs", profile: "",
			wantLayout: "0:whole 1:whole",
			wantRes:    map[string]int{"nvidia.com/gpu": 2},
			wantLabels: merge(h100Labels(), map[string]string{
				carvev1.LabelApplied: "full", carvev1.LabelSource: "default", carvev1.LabelState: "success",
				carvev1.LabelSharingStrategy: "none", carvev1.LabelGPUReplicas: "1",
			}),
		},
		{
			name: "label: balanced MIG", profile: "balanced",
			wantLayout: "0:[2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4] 1:[2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4]",
			wantRes:    map[string]int{"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2},
			wantLabels: merge(h100Labels(), map[string]string{
				carvev1.LabelApplied: "balanced", carvev1.LabelSource: "label", carvev1.LabelState: "success",
				carvev1.LabelSharingStrategy: "time-slicing", carvev1.LabelGPUReplicas: "1",
			},
				h100MIGLabels("1g.10gb", 4, 2, "9984", "16", "1", "1"),
				h100MIGLabels("2g.20gb", 2, 1, "20096", "32", "2", "2"),
				h100MIGLabels("3g.40gb", 2, 1, "40448", "60", "3", "3")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			res := h.reconcile(h.parse(testProfiles), nil, tt.profile)
			if res.State != carvev1.StateSuccess || res.Err != nil {
				t.Fatalf("state %s, err %v", res.State, res.Err)
			}
			if got := layout(h.gpus()); got != tt.wantLayout {
				t.Errorf("layout = %s, want %s", got, tt.wantLayout)
			}
			if diff := cmp.Diff(tt.wantRes, h.adv.counts()); diff != "" {
				t.Errorf("advertised (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLabels, res.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			// A disruptive change is recorded in progress first (one
			// generation), then done.
			if res.Annotation.Profile != res.Labels[carvev1.LabelApplied] || res.Annotation.Generation != int64(1+len(h.changes)) || len(res.Annotation.GPUs) != 2 || res.Annotation.Change != nil {
				t.Errorf("annotation %+v", res.Annotation)
			}
			if in, err := (&Checkpoints{Dir: h.dir}).Load(); err != nil || in != nil {
				t.Errorf("checkpoint left after a finished apply: %+v, %v", in, err)
			}
		})
	}
}

func TestReconcileUnchangedWritesNothing(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	f := h.parse(testProfiles)
	first := h.reconcile(f, nil, "balanced")
	firstAnn, _ := first.Annotation.Encode()
	h.m.ResetOpLog()
	h.now = h.now.Add(time.Hour)
	curLabels := maps.Clone(h.labels)
	second := h.reconcile(f, nil, "balanced")
	secondAnn, _ := second.Annotation.Encode()
	if firstAnn != secondAnn {
		t.Fatalf("annotation changed without a change:\n%s\n%s", firstAnn, secondAnn)
	}
	patch, err := MetadataPatch(curLabels, second.Labels, &first.Annotation, map[string]string{carvev1.AnnotationRecord: firstAnn}, map[string]string{carvev1.AnnotationRecord: secondAnn})
	if err != nil || patch != nil {
		t.Fatalf("patch = %s, %v; want none", patch, err)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Fatalf("second reconcile touched the GPUs: %v", ops)
	}
	if len(second.Events) != 0 {
		t.Fatalf("second reconcile emitted events: %v", second.Events)
	}
}

func TestReconcileReplicaOnlyChangeTouchesNoGPU(t *testing.T) {
	tests := []struct {
		name, from, to string
		wantRes        map[string]int
	}{
		{"whole GPUs 2 -> 4 replicas", "shared-2", "shared-4", map[string]int{"nvidia.com/gpu": 8}},
		{"whole GPUs unshared -> shared", "full", "shared-2", map[string]int{"nvidia.com/gpu": 4}},
		{"MIG replicas 2 -> 3", "balanced", "balanced-3", map[string]int{"nvidia.com/mig-1g.10gb": 12, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			f := h.parse(testProfiles)
			h.reconcile(f, nil, tt.from)
			h.m.ResetOpLog()
			before := h.prev.Generation
			res := h.reconcile(f, nil, tt.to)
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("replica change touched the GPUs: %v", ops)
			}
			if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != tt.to {
				t.Fatalf("state %s applied %q, want success %q", res.State, res.Labels[carvev1.LabelApplied], tt.to)
			}
			if diff := cmp.Diff(tt.wantRes, h.adv.counts()); diff != "" {
				t.Fatalf("advertised (-want +got):\n%s", diff)
			}
			if res.Annotation.Generation != before+1 || len(h.changes) > 1 {
				t.Fatalf("annotation generation %d, want %d; %d records of a change in progress, want none for the replica change", res.Annotation.Generation, before+1, len(h.changes))
			}
			if !hasEvent(res.Events, carvev1.ReasonSharingChanged, false) {
				t.Fatalf("events %v, want %s", reasons(res.Events), carvev1.ReasonSharingChanged)
			}
		})
	}
}

func TestReconcileRejectedConfigTouchesNoGPU(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		cfgErr  error
		profile string
		reason  string
		// selected is the profile the annotation records as selected; ""
		// for a rejected file, which selects nothing.
		selected string
	}{
		{name: "parse error", cfgErr: errors.New("profiles.yaml: line 3: unknown field \"profles\""), reason: carvev1.ReasonConfigRejected},
		{name: "impossible geometry", yaml: strings.Replace(testProfiles, "{1g.10gb: 7}", "{1g.10gb: 8}", 1), profile: "small", reason: carvev1.ReasonConfigRejected},
		// A profile that fits no GPU model at all makes the file broken,
		// whichever profile the node selects.
		{name: "impossible geometry in a profile not selected", yaml: strings.Replace(testProfiles, "{1g.10gb: 7}", "{1g.10gb: 8}", 1), profile: "balanced", reason: carvev1.ReasonConfigRejected},
		{name: "MIG profiles known and unknown mixed, not selected", yaml: testProfiles + "  odd:\n    - gpus: all\n      mig: {1g.10gb: 1, 9g.99gb: 1}\n", profile: "balanced", reason: carvev1.ReasonConfigRejected},
		{name: "label names an unknown profile", yaml: testProfiles, profile: "no-such", reason: carvev1.ReasonConfigRejected},
		// A selected profile that does not fit this node is unrealisable
		// here, not a broken file (TestReconcileMixedFleet).
		{name: "GPU index the node lacks", yaml: testProfiles + "  odd:\n    - gpus: [5]\n      mig: {7g.80gb: 1}\n", profile: "odd", reason: carvev1.ReasonUnrealisable, selected: "odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*2")
			h.reconcile(h.parse(testProfiles), nil, "balanced")
			before := layout(h.gpus())
			beforeRes := h.adv.counts()
			h.m.ResetOpLog()

			var f *configs.File
			if tt.cfgErr == nil {
				var err error
				if f, err = configs.Parse([]byte(tt.yaml)); err != nil {
					t.Fatalf("test file does not parse: %v", err)
				}
			}
			res := h.reconcile(f, tt.cfgErr, tt.profile)
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("rejected config touched the GPUs: %v", ops)
			}
			if got := layout(h.gpus()); got != before {
				t.Fatalf("layout %s, want unchanged %s", got, before)
			}
			if diff := cmp.Diff(beforeRes, h.adv.counts()); diff != "" {
				t.Fatalf("advertised changed (-before +after):\n%s", diff)
			}
			if res.State != carvev1.StateFailed || res.Labels[carvev1.LabelState] != carvev1.StateFailed {
				t.Fatalf("state %s, want failed", res.State)
			}
			if res.Labels[carvev1.LabelApplied] != "balanced" || res.Annotation.Profile != "balanced" {
				t.Fatalf("applied %q, want the profile the node keeps", res.Labels[carvev1.LabelApplied])
			}
			if !hasEvent(res.Events, tt.reason, true) {
				t.Fatalf("events %v, want Warning %s", res.Events, tt.reason)
			}
			if res.Annotation.LastError == "" || res.Err == nil {
				t.Fatal("no last error recorded")
			}
			if got := selectedProfile(res.Annotation); got != tt.selected {
				t.Fatalf("annotation selects %q, want %q", got, tt.selected)
			}
		})
	}
}

// selectedProfile is the profile an annotation records as selected, "" when
// none.
func selectedProfile(p carvev1.NodeRecord) string {
	if p.Selected == nil {
		return ""
	}
	return p.Selected.Profile
}

// mixedFleetProfiles is a file for a fleet of nodes of different sizes and
// models: split needs 8 GPUs, a100 MIG profiles only an A100 has. Both are
// valid for the fleet, neither fits a node of 4 H100s.
const mixedFleetProfiles = `version: v1
defaultProfile: full
profiles:
  full:
    - gpus: all
  h100:
    - gpus: all
      mig: {3g.40gb: 2}
  split:
    - gpus: [0, 1, 2, 3]
      mig: {1g.10gb: 7}
    - gpus: [4, 5, 6, 7]
      timeSlicing: {replicas: 2, renameShared: true}
  a100:
    - gpus: all
      mig: {1g.5gb: 7}
rules:
  - nodeSelector: {pool: big}
    profile: split
`

// On a mixed fleet, the profiles a node does not select do not matter to
// it; the one it selects must fit its GPUs, or it is unrealisable there and
// the GPUs are left alone.
func TestReconcileMixedFleet(t *testing.T) {
	tests := []struct {
		name      string
		profile   string            // carve.dev/profile label, "" for none
		labels    map[string]string // further node labels
		wantState string
		wantOps   bool
		// wantSelected is the annotation's selection: profile/source.
		wantSelected string
		// wantMessage are substrings of the ProfileUnrealisable Event.
		wantMessage []string
	}{
		{name: "unselected profiles name GPUs 4-7 and A100 profiles", wantState: carvev1.StateSuccess, wantSelected: "full/default"},
		{name: "selected profile fits", profile: "h100", wantState: carvev1.StateSuccess, wantOps: true, wantSelected: "h100/label"},
		{name: "selected profile names GPUs 4-7", profile: "split", wantState: carvev1.StateFailed, wantSelected: "split/label",
			wantMessage: []string{"profile split cannot be realised", "profiles.split[1].gpus: GPUs 4-7 are not on this node (it has GPUs 0-3)"}},
		{name: "profile with GPUs 4-7 selected by a rule", labels: map[string]string{"pool": "big"}, wantState: carvev1.StateFailed, wantSelected: "split/rule",
			wantMessage: []string{"profile split cannot be realised", "GPUs 4-7 are not on this node"}},
		{name: "selected profile of another model", profile: "a100", wantState: carvev1.StateFailed, wantSelected: "a100/label",
			wantMessage: []string{"profile a100 cannot be realised", "1g.5gb is not a MIG profile of H100-80GB (GPUs 0-3)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*4")
			f := h.parse(mixedFleetProfiles)
			if res := h.reconcile(f, nil, ""); res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "full" {
				t.Fatalf("setup: state %s applied %q: %v", res.State, res.Labels[carvev1.LabelApplied], res.Err)
			}
			before, beforeRes := layout(h.gpus()), h.adv.counts()
			h.m.ResetOpLog()
			maps.Copy(h.labels, tt.labels)

			res := h.reconcile(f, nil, tt.profile)
			if res.State != tt.wantState {
				t.Fatalf("state %s, want %s: %v (events %v)", res.State, tt.wantState, res.Err, res.Events)
			}
			if hasEvent(res.Events, carvev1.ReasonConfigRejected, true) {
				t.Fatalf("file rejected: %v", res.Events)
			}
			if got := len(h.mutations()) > 0; got != tt.wantOps {
				t.Fatalf("ops %v, want some: %v", h.mutations(), tt.wantOps)
			}
			sel := res.Annotation.Selected
			if sel == nil || sel.Profile+"/"+sel.Source != tt.wantSelected {
				t.Fatalf("annotation selected %+v, want %s", sel, tt.wantSelected)
			}
			if tt.wantState == carvev1.StateSuccess {
				return
			}
			var msg string
			for _, e := range res.Events {
				if e.Reason == carvev1.ReasonUnrealisable && e.Warning {
					msg = e.Message
				}
			}
			if msg == "" {
				t.Fatalf("events %v, want Warning %s", res.Events, carvev1.ReasonUnrealisable)
			}
			for _, want := range tt.wantMessage {
				if !strings.Contains(msg, want) {
					t.Errorf("event %q lacks %q", msg, want)
				}
			}
			if got := layout(h.gpus()); got != before {
				t.Errorf("layout %s, want unchanged %s", got, before)
			}
			if diff := cmp.Diff(beforeRes, h.adv.counts()); diff != "" {
				t.Errorf("advertised changed (-before +after):\n%s", diff)
			}
			if res.Labels[carvev1.LabelApplied] != "full" || res.Annotation.Profile != "full" {
				t.Errorf("applied %q / %q, want the profile the node keeps", res.Labels[carvev1.LabelApplied], res.Annotation.Profile)
			}
			if res.Annotation.LastError == "" || !strings.Contains(res.Annotation.LastError, tt.wantMessage[1]) {
				t.Errorf("last error %q, want it to say %q", res.Annotation.LastError, tt.wantMessage[1])
			}
		})
	}
}

// The annotation records the profile the node is reaching for while it is
// not there yet, and a change of the selection alone is a change of the
// content: the generation goes up. A disruptive change is recorded in
// progress before it starts: one generation more.
func TestReconcileRecordsSelection(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	steps := []struct {
		name        string
		profile     string
		setup       func(h *harness)
		wantState   string
		wantApplied string
		wantSel     carvev1.SelectedProfile
		wantGen     int64
	}{
		{name: "default", wantState: carvev1.StateSuccess, wantApplied: "full", wantSel: carvev1.SelectedProfile{Profile: "full", Source: "default"}, wantGen: 1},
		{name: "same again writes nothing new", wantState: carvev1.StateSuccess, wantApplied: "full", wantSel: carvev1.SelectedProfile{Profile: "full", Source: "default"}, wantGen: 1},
		{name: "the same profile pinned: only the source changes", profile: "full", wantState: carvev1.StateSuccess, wantApplied: "full",
			wantSel: carvev1.SelectedProfile{Profile: "full", Source: "label"}, wantGen: 2},
		{name: "balanced applied", profile: "balanced", wantState: carvev1.StateSuccess, wantApplied: "balanced",
			wantSel: carvev1.SelectedProfile{Profile: "balanced", Source: "label"}, wantGen: 4},
		{name: "draining towards small", profile: "small", setup: func(h *harness) {
			h.inUse.hold(h.migUUID(0, "3g.40gb"), "trainer")
		}, wantState: carvev1.StateDraining, wantApplied: "balanced", wantSel: carvev1.SelectedProfile{Profile: "small", Source: "label"}, wantGen: 6},
		// Still draining, but towards another profile: the selection
		// alone changed.
		{name: "draining towards shared-2", profile: "shared-2", wantState: carvev1.StateDraining, wantApplied: "balanced",
			wantSel: carvev1.SelectedProfile{Profile: "shared-2", Source: "label"}, wantGen: 7},
	}
	for _, st := range steps {
		if st.setup != nil {
			st.setup(h)
		}
		res := h.reconcile(f, nil, st.profile)
		a := res.Annotation
		if res.State != st.wantState || a.Profile != st.wantApplied {
			t.Fatalf("%s: state %s applied %q, want %s %q (%v)", st.name, res.State, a.Profile, st.wantState, st.wantApplied, res.Err)
		}
		if diff := cmp.Diff(&st.wantSel, a.Selected); diff != "" {
			t.Fatalf("%s: selected (-want +got):\n%s", st.name, diff)
		}
		if a.Generation != st.wantGen {
			t.Fatalf("%s: generation %d, want %d", st.name, a.Generation, st.wantGen)
		}
	}
}

func TestReconcileRejectedConfigAfterRestartKeepsSharing(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	h.reconcile(h.parse(testProfiles), nil, "balanced")
	want := h.adv.counts()
	h.adv.current = nil
	h.r = h.newReconciler() // the agent restarts with a broken file
	h.m.ResetOpLog()
	res := h.reconcile(nil, errors.New("bad yaml"), "balanced")
	if res.State != carvev1.StateFailed || len(h.mutations()) != 0 {
		t.Fatalf("state %s, ops %v", res.State, h.mutations())
	}
	if diff := cmp.Diff(want, h.adv.counts()); diff != "" {
		t.Fatalf("advertised after restart, want as before (sharing from the annotation) (-want +got):\n%s", diff)
	}
}

func TestReconcileBusyDeviceDrains(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	busy := h.migUUID(0, "3g.40gb")
	if err := h.m.SetBusy(busy, true); err != nil {
		t.Fatal(err)
	}
	h.inUse.hold(busy, "trainer")
	h.m.ResetOpLog()

	res := h.reconcile(f, nil, "small")
	if res.State != carvev1.StateDraining {
		t.Fatalf("state %s, want draining (events %v)", res.State, res.Events)
	}
	if !hasEvent(res.Events, carvev1.ReasonDraining, false) {
		t.Fatalf("events %v, want %s", reasons(res.Events), carvev1.ReasonDraining)
	}
	if want := h.now.Add(10 * time.Second); !res.Requeue.Equal(want) {
		t.Fatalf("requeue %v, want %v", res.Requeue, want)
	}
	for _, op := range h.mutations() {
		if op.GPU == 0 {
			t.Fatalf("blocked GPU 0 was touched: %v", op)
		}
	}
	gpus := h.gpus()
	if got := layout(gpus[1:]); got != "1:[1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6]" {
		t.Fatalf("the free GPU was not changed: %s", got)
	}
	if res.Labels[carvev1.LabelApplied] != "balanced" {
		t.Fatalf("applied %q while draining, want the old profile", res.Labels[carvev1.LabelApplied])
	}
	// The devices the change removes from GPU 0 are no longer advertised,
	// so no new pod lands on them; the kept 1g.10gb devices still are.
	for _, devs := range h.adv.current {
		for _, d := range devs {
			if d.GPU == 0 && d.MIGProfile != "1g.10gb" {
				t.Fatalf("device %s (%s) of the draining GPU still advertised", d.ID, d.MIGProfile)
			}
		}
	}

	// Still busy within the timeout: draining, no repeated event.
	h.now = h.now.Add(10 * time.Minute)
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateDraining || len(res.Events) != 0 {
		t.Fatalf("state %s events %v, want draining and no new event", res.State, res.Events)
	}

	// Past the drain timeout: failed, nothing killed.
	h.now = h.now.Add(25 * time.Minute)
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateFailed || !hasEvent(res.Events, carvev1.ReasonDrainTimeout, true) {
		t.Fatalf("state %s events %v, want failed with %s", res.State, reasons(res.Events), carvev1.ReasonDrainTimeout)
	}
	if h.migUUID(0, "3g.40gb") != busy {
		t.Fatal("the busy instance was destroyed")
	}

	// The pod ends: the change completes.
	h.inUse.release(busy)
	if err := h.m.SetBusy(busy, false); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(time.Minute)
	res = h.reconcile(f, nil, "small")
	if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "small" || !hasEvent(res.Events, carvev1.ReasonRepartitioned, false) {
		t.Fatalf("state %s applied %q events %v", res.State, res.Labels[carvev1.LabelApplied], reasons(res.Events))
	}
	if got := h.adv.counts()["nvidia.com/mig-1g.10gb"]; got != 14 {
		t.Fatalf("advertised %d 1g.10gb, want 14", got)
	}
}

func TestReconcileDrainPolicies(t *testing.T) {
	tests := []struct {
		policy    string
		wantState string
		wantEvent string
		warning   bool
		wantEvict bool
	}{
		{"fail", carvev1.StateFailed, carvev1.ReasonBlocked, true, false},
		{"evict", carvev1.StateDraining, carvev1.ReasonEvicting, false, true},
		{"wait", carvev1.StateDraining, carvev1.ReasonDraining, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			f := h.parse(testProfiles + "drain: {policy: " + tt.policy + ", timeout: 5m}\n")
			h.reconcile(f, nil, "balanced")
			before := h.adv.counts()
			busy := h.migUUID(0, "2g.20gb")
			h.inUse.hold(busy, "server")
			h.m.ResetOpLog()
			res := h.reconcile(f, nil, "small")
			// Draining stops advertising what the change removes (all but
			// the two kept 1g.10gb); failing leaves everything advertised.
			wantRes := map[string]int{"nvidia.com/mig-1g.10gb": 4}
			if tt.policy == "fail" {
				wantRes = before
			}
			if diff := cmp.Diff(wantRes, h.adv.counts()); diff != "" {
				t.Fatalf("advertised (-want +got):\n%s", diff)
			}
			if res.State != tt.wantState || !hasEvent(res.Events, tt.wantEvent, tt.warning) {
				t.Fatalf("state %s events %v, want %s with %s", res.State, res.Events, tt.wantState, tt.wantEvent)
			}
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("blocked change touched the GPU: %v", ops)
			}
			if got := len(res.Evict) == 1 && res.Evict[0].Pod == "server"; got != tt.wantEvict {
				t.Fatalf("evict %+v, want the pod holding %s: %v", res.Evict, busy, tt.wantEvict)
			}
		})
	}
}

// A pod gets a device between the plan and the withdrawal: the re-check
// sees it and the instance is not destroyed.
func TestReconcileWithdrawRace(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	victim := h.migUUID(0, "3g.40gb")
	h.adv.onWithdraw = func(ids []string) {
		if !slices.Contains(ids, victim) {
			t.Errorf("withdrawn %v, want %s among them", ids, victim)
		}
		h.inUse.hold(victim, "late") // admitted before the kubelet saw the new list
	}
	h.m.ResetOpLog()
	calls := h.inUse.calls
	res := h.reconcile(f, nil, "small")
	if got := h.inUse.calls - calls; got != 2 {
		t.Fatalf("in-use asked %d times, want 2 (plan, then re-check after withdrawing)", got)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Fatalf("GPU touched though a pod got a device before the withdrawal: %v", ops)
	}
	if res.State != carvev1.StateDraining {
		t.Fatalf("state %s, want draining", res.State)
	}
	if h.migUUID(0, "3g.40gb") != victim {
		t.Fatal("instance destroyed")
	}
}

func TestReconcileWithdrawsBeforeDestroying(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	h.reconcile(f, nil, "balanced")
	gone := []string{h.migUUID(0, "2g.20gb"), h.migUUID(0, "3g.40gb")}
	slices.Sort(gone)
	var opsAtWithdraw int
	h.adv.onWithdraw = func([]string) { opsAtWithdraw = len(h.m.OpLog()) }
	h.adv.withdrawn = nil
	h.m.ResetOpLog()
	onApply := -1
	h.r.Hooks.BeforeApply = func(_ context.Context, profile string, plans []partition.GPUPlan) {
		if profile != "small" || len(plans) != 1 {
			t.Errorf("BeforeApply(%s, %d plans), want small with 1 plan", profile, len(plans))
		}
		onApply = len(h.m.OpLog())
	}
	res := h.reconcile(f, nil, "small")
	if onApply != 0 {
		t.Fatalf("OnApply saw %d ops done, want to be called once before any", onApply)
	}
	if res.State != carvev1.StateSuccess {
		t.Fatalf("state %s: %v", res.State, res.Err)
	}
	if diff := cmp.Diff([][]string{gone}, h.adv.withdrawn); diff != "" {
		t.Fatalf("withdrawn (-want +got):\n%s", diff)
	}
	if opsAtWithdraw != 0 {
		t.Fatalf("%d ops ran before the withdrawal", opsAtWithdraw)
	}
	if res.OpsApplied == 0 || len(h.mutations()) == 0 {
		t.Fatal("nothing applied")
	}
}

func TestReconcileMaintenanceWindows(t *testing.T) {
	// 02:00-04:00 UTC daily; the harness's clock says 12:00.
	maint := "maintenance:\n  - schedule: \"0 2 * * *\"\n    duration: 2h\n"
	tests := []struct {
		name, from, to string
		wantState      string
		wantOps        bool
	}{
		{"disruptive change waits", "balanced", "small", carvev1.StatePending, false},
		{"MIG mode change waits", "full", "balanced", carvev1.StatePending, false},
		{"adding instances into free space runs", "half", "half-plus", carvev1.StateSuccess, true},
		{"replicas change runs", "shared-2", "shared-4", carvev1.StateSuccess, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			// Reach the starting point inside a maintenance window.
			inside := h.now
			h.now = time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
			f := h.parse(testProfiles + maint)
			if res := h.reconcile(f, nil, tt.from); res.State != carvev1.StateSuccess {
				t.Fatalf("setup: state %s: %v", res.State, res.Err)
			}
			h.now = inside
			h.m.ResetOpLog()
			res := h.reconcile(f, nil, tt.to)
			if res.State != tt.wantState {
				t.Fatalf("state %s, want %s (%v)", res.State, tt.wantState, res.Err)
			}
			if got := len(h.mutations()) > 0; got != tt.wantOps {
				t.Fatalf("ops %v, want some: %v", h.mutations(), tt.wantOps)
			}
			if tt.wantState != carvev1.StatePending {
				return
			}
			if want := time.Date(2026, 3, 3, 2, 0, 0, 0, time.UTC); !res.Requeue.Equal(want) {
				t.Fatalf("requeue %v, want the next window start %v", res.Requeue, want)
			}
			if !hasEvent(res.Events, carvev1.ReasonPending, false) || res.Labels[carvev1.LabelApplied] != tt.from {
				t.Fatalf("events %v applied %q", reasons(res.Events), res.Labels[carvev1.LabelApplied])
			}
			if got := selectedProfile(res.Annotation); got != tt.to || res.Annotation.Profile != tt.from {
				t.Fatalf("annotation: applied %q selected %q while pending, want %q and %q", res.Annotation.Profile, got, tt.from, tt.to)
			}
			// In the window the change runs.
			h.now = res.Requeue
			if res := h.reconcile(f, nil, tt.to); res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != tt.to {
				t.Fatalf("in the window: state %s applied %q: %v", res.State, res.Labels[carvev1.LabelApplied], res.Err)
			}
		})
	}
}

func TestReconcileRebootRequired(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
	}{
		{"platform needs a reboot", func(h *harness) {
			if err := h.m.SetRebootOnly(0, true); err != nil {
				h.t.Fatal(err)
			}
		}},
		{"a process outside Kubernetes holds the GPU", func(h *harness) {
			gpus := h.gpus()
			if err := h.m.SetBusy(gpus[0].UUID, true); err != nil {
				h.t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			f := h.parse(testProfiles)
			h.reconcile(f, nil, "full")
			tt.setup(h)
			res := h.reconcile(f, nil, "balanced")
			if res.State != carvev1.StateRebootRequired || !hasEvent(res.Events, carvev1.ReasonRebootRequired, true) {
				t.Fatalf("state %s events %v, want reboot-required", res.State, reasons(res.Events))
			}
			if !partition.RebootRequired(res.Err) {
				t.Fatalf("err %v, want a reboot-required error", res.Err)
			}
			if res.Requeue.IsZero() {
				t.Fatal("no retry scheduled")
			}
			if res.Labels[carvev1.LabelApplied] != "full" {
				t.Fatalf("applied %q, want full", res.Labels[carvev1.LabelApplied])
			}
			// The machine reboots: the pending mode takes effect and the
			// next reconcile finishes the change.
			if err := h.m.Reboot(); err != nil {
				t.Fatal(err)
			}
			if err := h.m.SetRebootOnly(0, false); err != nil {
				t.Fatal(err)
			}
			res = h.reconcile(f, nil, "balanced")
			if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "balanced" {
				t.Fatalf("after reboot: state %s applied %q: %v", res.State, res.Labels[carvev1.LabelApplied], res.Err)
			}
		})
	}
}

func TestReconcileWindowSelectsProfile(t *testing.T) {
	// Weekdays 20:00 for 10h; Monday 12:00 is outside, 21:00 inside.
	win := "windows:\n  - name: nightly\n    schedule: \"0 20 * * 1-5\"\n    duration: 10h\n    profile: shared-4\n"
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles + win)
	res := h.reconcile(f, nil, "")
	if res.Labels[carvev1.LabelApplied] != "full" || res.Labels[carvev1.LabelWindow] != "" {
		t.Fatalf("outside the window: labels %v", res.Labels)
	}
	if want := time.Date(2026, 3, 2, 20, 0, 0, 0, time.UTC); !res.Requeue.Equal(want) {
		t.Fatalf("requeue %v, want the window start %v", res.Requeue, want)
	}
	h.now = res.Requeue
	res = h.reconcile(f, nil, "")
	if res.Labels[carvev1.LabelApplied] != "shared-4" || res.Labels[carvev1.LabelWindow] != "nightly" || res.Labels[carvev1.LabelSource] != "window" {
		t.Fatalf("in the window: labels %v", res.Labels)
	}
	if diff := cmp.Diff(&carvev1.SelectedProfile{Profile: "shared-4", Source: "window", Window: "nightly"}, res.Annotation.Selected); diff != "" {
		t.Fatalf("in the window: annotation selected (-want +got):\n%s", diff)
	}
	if want := time.Date(2026, 3, 3, 6, 0, 0, 0, time.UTC); !res.Requeue.Equal(want) {
		t.Fatalf("requeue %v, want the window end %v", res.Requeue, want)
	}
	h.now = res.Requeue
	res = h.reconcile(f, nil, "")
	if _, ok := res.Labels[carvev1.LabelWindow]; ok || res.Labels[carvev1.LabelApplied] != "full" {
		t.Fatalf("after the window: labels %v", res.Labels)
	}
	if _, ok := h.labels[carvev1.LabelWindow]; ok {
		t.Fatal("window label not removed from the node")
	}
}

// TestReconcileNoProfileLeavesGPUs: a node nothing selects is adopted as
// it is: no GPU operation, state adopted and profile.source adopted.
func TestReconcileNoProfileLeavesGPUs(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(strings.Replace(testProfiles, "defaultProfile: full\n", "", 1))
	res := h.reconcile(f, nil, "")
	if res.State != carvev1.StateAdopted || len(h.mutations()) != 0 {
		t.Fatalf("state %s ops %v, want %s and none", res.State, h.mutations(), carvev1.StateAdopted)
	}
	if got := res.Labels[carvev1.LabelSource]; got != carvev1.SourceAdopted {
		t.Fatalf("%s = %q, want %q", carvev1.LabelSource, got, carvev1.SourceAdopted)
	}
	if res.Annotation.State != carvev1.StateAdopted {
		t.Fatalf("annotation state %q, want %q", res.Annotation.State, carvev1.StateAdopted)
	}
	if _, ok := res.Labels[carvev1.LabelApplied]; ok {
		t.Fatalf("applied label %q without a profile", res.Labels[carvev1.LabelApplied])
	}
	if res.Annotation.Selected != nil {
		t.Fatalf("annotation selects %+v without a profile", res.Annotation.Selected)
	}
	if got := h.adv.counts()["nvidia.com/gpu"]; got != 1 {
		t.Fatalf("advertised %v, want the whole GPU", h.adv.counts())
	}
}

func TestReconcileTransientErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
	}{
		{"NVML fails", func(h *harness) {
			if err := h.m.InjectFault(sim.Fault{Call: "DeviceCount", GPU: -1, Err: partition.ErrUninitialized, Times: 1}); err != nil {
				h.t.Fatal(err)
			}
		}},
		{"PodResources fails", func(h *harness) { h.inUse.err = errors.New("kubelet away") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "h100-80gb*1")
			f := h.parse(testProfiles)
			h.reconcile(f, nil, "full")
			h.m.ResetOpLog()
			tt.setup(h)
			h.labels[carvev1.LabelProfile] = "balanced"
			if _, err := h.r.Reconcile(context.Background(), Input{Config: f, Labels: h.labels, Now: h.now, Previous: h.prev}); err == nil {
				t.Fatal("Reconcile succeeded")
			}
			if ops := h.mutations(); len(ops) != 0 {
				t.Fatalf("GPUs touched: %v", ops)
			}
		})
	}
}

var errCrash = errors.New("simulated crash")

// The agent dies after op k of an apply, for every k: a restarted agent
// converges to the same partition as an uninterrupted apply, without extra
// instances.
func TestReconcileCrashAfterEveryOp(t *testing.T) {
	for _, from := range []string{"full", "balanced"} {
		ref := newHarness(t, "h100-80gb*2")
		f := ref.parse(testProfiles)
		ref.reconcile(f, nil, from)
		res := ref.reconcile(f, nil, "small")
		want, total := layout(ref.gpus()), res.OpsApplied
		if total < 2 {
			t.Fatalf("%s -> small: %d ops", from, total)
		}
		for k := 1; k <= total; k++ { // k == total: after the last op, before the checkpoint is removed
			t.Run(fmt.Sprintf("%s->small/after-op-%d", from, k), func(t *testing.T) {
				h := newHarness(t, "h100-80gb*2")
				h.reconcile(f, nil, from)
				n := 0
				h.r.Hooks.AfterOp = func(int, int, partition.Op) error {
					if n++; n == k {
						return errCrash
					}
					return nil
				}
				h.labels[carvev1.LabelProfile] = "small"
				if _, err := h.r.Reconcile(context.Background(), Input{Config: f, Labels: h.labels, Now: h.now, Previous: h.prev}); err != nil {
					t.Fatal(err)
				}
				intent, err := (&Checkpoints{Dir: h.dir}).Load()
				if err != nil || intent == nil || intent.Profile != "small" || intent.OpsDone() != k {
					t.Fatalf("checkpoint after the crash: %+v, %v; want small with %d ops done", intent, err, k)
				}
				h.r = h.newReconciler() // restart
				res := h.reconcile(f, nil, "small")
				if res.State != carvev1.StateSuccess {
					t.Fatalf("state %s after restart: %v", res.State, res.Err)
				}
				if !hasEvent(res.Events, carvev1.ReasonResumingApply, false) {
					t.Fatalf("events %v, want %s", reasons(res.Events), carvev1.ReasonResumingApply)
				}
				if got := layout(h.gpus()); got != want {
					t.Fatalf("layout %s, want %s", got, want)
				}
				if intent, _ := (&Checkpoints{Dir: h.dir}).Load(); intent != nil {
					t.Fatal("checkpoint left after converging")
				}
			})
		}
	}
}

func TestReconcileCheckpointFailureStopsApply(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.r.Checkpoints = &Checkpoints{Dir: filepath.Join(blocker, "state")} // cannot be made
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateFailed || len(h.mutations()) != 0 {
		t.Fatalf("state %s ops %v; want failed before any op", res.State, h.mutations())
	}
}

// The whole file is checked on carve's catalogue, as carvectl validate
// checks it, and on the models of this node's GPUs that the catalogue
// lacks; the catalogue's version of a model wins; an entry for a model
// neither knows is unverified, not an error.
func TestFileGeometry(t *testing.T) {
	x300 := partition.Model{Key: "X300-400GB", Product: "NVIDIA X300", MemoryMiB: 409600, MemorySlices: 8, ComputeSlices: 7,
		Profiles: []partition.GIProfile{{ID: 0, Name: "7g.400gb", ComputeSlices: 7, MemorySlices: 8, MemoryMiB: 409600, MaxCount: 1,
			Placements: []partition.Placement{{Start: 0, Size: 8}}}}}
	// A device that reports an H100 with fewer profiles than the catalogue.
	oddH100 := partition.Model{Key: "H100-80GB", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, MemorySlices: 8, ComputeSlices: 7,
		Profiles: []partition.GIProfile{{ID: 0, Name: "7g.80gb", ComputeSlices: 7, MemorySlices: 8, MemoryMiB: 81559, MaxCount: 1,
			Placements: []partition.Placement{{Start: 0, Size: 8}}}}}
	node := partition.Node{
		GPUs:   []partition.GPU{{Index: 0, Model: "X300-400GB", Product: "NVIDIA X300", MIGCapable: true}, h100(1, "GPU-b")},
		Models: map[int]partition.Model{0: x300, 1: oddH100},
	}
	tests := []struct {
		name           string
		entries        string
		wantErr        string
		wantUnverified string
	}{
		{"a model only this node knows", "    - gpus: all\n      model: X300\n      mig: {7g.400gb: 1}\n", "", ""},
		{"a model only this node knows, checked on it", "    - gpus: all\n      model: X300\n      mig: {7g.400gb: 2}\n", "7g.400gb x2", ""},
		{"the catalogue's H100 wins over the node's", "    - gpus: all\n      model: H100-80GB\n      mig: {1g.10gb: 7}\n", "", ""},
		{"a model neither knows", "    - gpus: all\n      model: V100\n      mig: {1g.5gb: 1}\n", "", `"V100" matches no GPU model known here`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := configs.Parse([]byte("version: v1\nprofiles:\n  p:\n" + tt.entries))
			if err != nil {
				t.Fatal(err)
			}
			unverified, err := desired.CheckFile(f, node)
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckFile error %v, want one saying %q", err, tt.wantErr)
			}
			if got := len(unverified); got != 0 && tt.wantUnverified == "" || got != 1 && tt.wantUnverified != "" ||
				got == 1 && !strings.Contains(unverified[0].String(), tt.wantUnverified) {
				t.Fatalf("unverified %v, want %q", unverified, tt.wantUnverified)
			}
		})
	}
}

// futureProfiles adds to testProfiles profiles for GPUs newer than the
// catalogue: one by a model filter, one by MIG profiles no model here has.
const futureProfiles = testProfiles + `  future:
    - gpus: all
      model: X300-400GB
      mig: {1g.50gb: 7}
  future-unfiltered:
    - gpus: all
      mig: {1g.57gb: 7}
`

// TestReconcileUnverifiedEntries: entries for GPU models neither the
// catalogue nor the node knows do not reject the file (a mixed fleet's file
// holds them for other nodes); they are reported once as unverified, and
// checked where selected.
func TestReconcileUnverifiedEntries(t *testing.T) {
	h := newHarness(t, "h100-80gb*2")
	f := h.parse(futureProfiles)
	res := h.reconcile(f, nil, "balanced")
	if res.State != carvev1.StateSuccess || res.Labels[carvev1.LabelApplied] != "balanced" {
		t.Fatalf("state %s applied %q, want balanced applied: %v", res.State, res.Labels[carvev1.LabelApplied], res.Err)
	}
	var msg string
	for _, e := range res.Events {
		if e.Reason == carvev1.ReasonConfigUnverified && e.Warning {
			msg = e.Message
		}
	}
	for _, want := range []string{"profile file entries not checked on this node", `profiles.future[0].model: "X300-400GB"`, "profiles.future-unfiltered[0].mig: no GPU model known here has any of 1g.57gb"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ConfigUnverified message %q lacks %q", msg, want)
		}
	}
	if again := h.reconcile(f, nil, "balanced"); hasEvent(again.Events, carvev1.ReasonConfigUnverified, true) {
		t.Errorf("the same unverified entries reported again: %v", again.Events)
	}

	// Selected here, each is checked on this node's GPUs.
	h.m.ResetOpLog()
	if res := h.reconcile(f, nil, "future-unfiltered"); res.State != carvev1.StateFailed || !hasEvent(res.Events, carvev1.ReasonUnrealisable, true) {
		t.Errorf("future-unfiltered on H100s: state %s, events %v; want failed, ProfileUnrealisable", res.State, res.Events)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("an unrealisable profile touched the GPUs: %v", ops)
	}
	// A profile whose model filters select none of the node's GPUs is
	// unrealisable here too, and says why, rather than whole GPUs
	// reported as success.
	res = h.reconcile(f, nil, "future")
	if res.State != carvev1.StateFailed || !hasEvent(res.Events, carvev1.ReasonUnrealisable, true) ||
		res.Err == nil || !strings.Contains(res.Err.Error(), "selects none of this node's GPUs (2 x H100-80GB): its entries are for model X300-400GB") {
		t.Errorf("future on H100s: state %s, events %v, error %v; want failed, ProfileUnrealisable naming the models", res.State, res.Events, res.Err)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("a profile for other GPUs touched the GPUs: %v", ops)
	}
}
