package allocate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/test/bench/report"
)

// startTestBench starts both nodes' servers for a test, klog silenced.
func startTestBench(t *testing.T) *bench {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Cleanup(silenceKlog())
	b, err := startBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

func TestRunShort(t *testing.T) {
	var log strings.Builder
	tables, err := Run(context.Background(), Options{Short: true, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	cols := []string{"case", "calls (each)", "carve p50", "carve p99", "stub p50", "stub p99", "p50 carve/stub", "p99 carve/stub"}
	big := "8 GPUs x 7 MIG 1g.10gb x 16 replicas (896 devices)"
	want := []report.Table{
		{Title: "Allocate over gRPC", Command: "make bench BENCH=allocate", Columns: cols, Rows: [][]string{
			{"8 GPUs x 4 replicas (32 devices), 2 replicas"}, {big + ", 1 replica"}, {big + ", 16 replicas"},
		}},
		{Title: "GetPreferredAllocation over gRPC", Command: "make bench BENCH=allocate", Columns: cols, Rows: [][]string{
			{"8 GPUs x 4 replicas (32 devices) available, 2 wanted"}, {big + " available, 4 wanted"}, {big + " available, 16 wanted"},
		}},
	}
	var got []report.Table
	for _, tb := range tables {
		if err := tb.Check(); err != nil {
			t.Error(err)
		}
		if !strings.Contains(tb.About, "NewDevicePluginStub") || len(tb.Notes) == 0 {
			t.Errorf("%s: the About does not name the baseline, or there are no notes", tb.Title)
		}
		g := report.Table{Title: tb.Title, Command: tb.Command, Columns: tb.Columns}
		for _, r := range tb.Rows {
			g.Rows = append(g.Rows, r[:1])
			checkRow(t, tb.Title, r)
		}
		got = append(got, g)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
	if strings.Count(log.String(), "\n") != 6 {
		t.Errorf("log has not one line per case:\n%s", log.String())
	}
}

// checkRow checks a row of short mode: the calls, durations, ratios.
func checkRow(t *testing.T, title string, r []string) {
	t.Helper()
	if r[1] != "200" {
		t.Errorf("%s: %s: %s calls, want 200", title, r[0], r[1])
	}
	for _, d := range r[2:6] {
		if !strings.HasSuffix(d, "s") {
			t.Errorf("%s: %s: duration %q", title, r[0], d)
		}
	}
	for _, ratio := range r[6:] {
		if !strings.HasSuffix(ratio, "x") {
			t.Errorf("%s: %s: ratio %q", title, r[0], ratio)
		}
	}
}

func TestNodes(t *testing.T) {
	b := startTestBench(t)
	tests := []struct {
		name     string
		srv      *servers
		resource string
		devices  int
		physical int // distinct physical devices behind strided(16)
	}{
		{"8 GPUs x 4", b.small, "nvidia.com/gpu", 32, 8},
		{"8 GPUs x 7 MIG x 16", b.big, "nvidia.com/mig-1g.10gb", 896, 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.srv.node
			if n.resource != tt.resource || len(n.ids()) != tt.devices {
				t.Errorf("%d devices of %s, want %d of %s", len(n.ids()), n.resource, tt.devices, tt.resource)
			}
			if got := len(n.physical(n.strided(16))); got != tt.physical {
				t.Errorf("strided(16) is on %d physical devices, want %d", got, tt.physical)
			}
			// Both servers registered, each with a stream open.
			want := []string{filepath.Base(tt.srv.mgr.SocketPath(tt.resource)), stubSocket}
			if diff := cmp.Diff(want, tt.srv.kubelet.registered()); diff != "" {
				t.Errorf("registrations (-want +got):\n%s", diff)
			}
			// The stub serves exactly what carve advertises.
			var carveIDs, stubIDs []string
			for _, d := range tt.srv.mgr.Advertised()[tt.resource] {
				carveIDs = append(carveIDs, d.ID+"/"+map[bool]string{true: pluginapi.Healthy, false: pluginapi.Unhealthy}[d.Healthy])
			}
			for _, d := range tt.srv.stubDevs {
				stubIDs = append(stubIDs, d.ID+"/"+d.Health)
			}
			if diff := cmp.Diff(carveIDs, stubIDs); diff != "" || len(stubIDs) != tt.devices {
				t.Errorf("stub devices differ from carve's (-carve +stub):\n%s", diff)
			}
		})
	}
}

// TestAllocateSameDevices asks both servers the same Allocate requests:
// carve answers the physical devices behind the IDs, the stub the IDs,
// and the two name the same devices.
func TestAllocateSameDevices(t *testing.T) {
	b := startTestBench(t)
	ctx := context.Background()
	for _, c := range b.cases() {
		if c.table != allocateTable {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			carve, err := c.srv.carve.Allocate(ctx, c.allocateRequest())
			if err != nil {
				t.Fatal(err)
			}
			stub, err := c.srv.stubClient.Allocate(ctx, c.allocateRequest())
			if err != nil {
				t.Fatal(err)
			}
			carveEnv := carve.GetContainerResponses()[0].GetEnvs()[plugin.VisibleDevicesEnv]
			stubEnv := stub.GetContainerResponses()[0].GetEnvs()[plugin.VisibleDevicesEnv]
			if diff := cmp.Diff(c.ids, strings.Split(stubEnv, ",")); diff != "" {
				t.Errorf("stub's devices (-requested +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.srv.node.physical(strings.Split(stubEnv, ",")), strings.Split(carveEnv, ",")); diff != "" {
				t.Errorf("carve's devices differ from the stub's (-stub +carve):\n%s", diff)
			}
			if err := c.checkAllocate(carve, stub); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestAllocate896 checks carve's answer at 896 devices against the
// simulator's MIG devices: one UUID per requested replica's MIG device.
func TestAllocate896(t *testing.T) {
	b := startTestBench(t)
	uuids := map[string]bool{}
	gpus, err := partition.ReadInventory(b.big.node.lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		for _, in := range g.Instances {
			uuids[in.UUID()] = true
		}
	}
	if len(uuids) != 56 {
		t.Fatalf("the simulator has %d MIG devices, want 56", len(uuids))
	}
	for _, k := range []int{1, 16} {
		ids := b.big.node.strided(k)
		resp, err := b.big.carve.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(resp.GetContainerResponses()[0].GetEnvs()[plugin.VisibleDevicesEnv], ",")
		var want []string
		for _, id := range ids {
			want = append(want, strings.Split(id, "::")[0])
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d replicas: devices (-want +got):\n%s", k, diff)
		}
		for _, u := range got {
			if !uuids[u] {
				t.Errorf("%d replicas: %s is not a MIG device of the simulator", k, u)
			}
		}
	}
}

// TestPreferred checks GetPreferredAllocation: carve picks exactly the
// size asked, distinct, available, spread over physical devices; the stub
// answers no preference (the floor the table claims).
func TestPreferred(t *testing.T) {
	b := startTestBench(t)
	ctx := context.Background()
	for _, c := range b.cases() {
		if c.table != preferredTable {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			carve, err := c.srv.carve.GetPreferredAllocation(ctx, c.preferredRequest())
			if err != nil {
				t.Fatal(err)
			}
			stub, err := c.srv.stubClient.GetPreferredAllocation(ctx, c.preferredRequest())
			if err != nil {
				t.Fatal(err)
			}
			if err := c.checkPreferred(carve, stub); err != nil {
				t.Fatal(err)
			}
			got := carve.GetContainerResponses()[0].GetDeviceIDs()
			if n := len(c.srv.node.physical(got)); n != c.size {
				t.Errorf("carve's %d devices are on %d physical devices, want them spread over %d", len(got), n, c.size)
			}
		})
	}
}

// TestChecksRejectWrongAnswers makes sure the checks Run applies before
// timing would catch a server answering the wrong thing.
func TestChecksRejectWrongAnswers(t *testing.T) {
	b := startTestBench(t)
	ids := b.big.node.strided(2)
	alloc := benchCase{name: "alloc", table: allocateTable, srv: b.big, ids: ids}
	pref := benchCase{name: "pref", table: preferredTable, srv: b.big, ids: ids, size: 2}
	env := func(v string) *pluginapi.AllocateResponse {
		return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{Envs: map[string]string{plugin.VisibleDevicesEnv: v}}}}
	}
	prefers := func(lists ...[]string) *pluginapi.PreferredAllocationResponse {
		r := &pluginapi.PreferredAllocationResponse{}
		for _, l := range lists {
			r.ContainerResponses = append(r.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: l})
		}
		return r
	}
	right := strings.Join(b.big.node.physical(ids), ",")
	allocTests := []struct {
		name        string
		carve, stub *pluginapi.AllocateResponse
		ok          bool
	}{
		{"right", env(right), env(strings.Join(ids, ",")), true},
		{"carve names the replica IDs", env(strings.Join(ids, ",")), env(strings.Join(ids, ",")), false},
		{"carve names one device", env(b.big.node.physical(ids)[0]), env(strings.Join(ids, ",")), false},
		{"stub names other IDs", env(right), env(ids[0]), false},
		{"no container answer", &pluginapi.AllocateResponse{}, env(strings.Join(ids, ",")), false},
	}
	for _, tt := range allocTests {
		if err := alloc.checkAllocate(tt.carve, tt.stub); (err == nil) != tt.ok {
			t.Errorf("checkAllocate, %s: %v", tt.name, err)
		}
	}
	prefTests := []struct {
		name        string
		carve, stub *pluginapi.PreferredAllocationResponse
		ok          bool
	}{
		{"right", prefers(ids), prefers(), true},
		{"too few", prefers(ids[:1]), prefers(), false},
		{"duplicate", prefers([]string{ids[0], ids[0]}), prefers(), false},
		{"not available", prefers([]string{ids[0], "GPU-x"}), prefers(), false},
		{"stub prefers", prefers(ids), prefers(ids), false},
	}
	for _, tt := range prefTests {
		if err := pref.checkPreferred(tt.carve, tt.stub); (err == nil) != tt.ok {
			t.Errorf("checkPreferred, %s: %v", tt.name, err)
		}
	}
}

// TestInterleave checks the order of the calls, the counts, the budget
// and errors.
func TestInterleave(t *testing.T) {
	var order []side
	rec := func(s side, failAt int) call {
		n := 0
		return func(context.Context) error {
			order = append(order, s)
			if n++; n == failAt {
				return errBoom
			}
			return nil
		}
	}
	tests := []struct {
		name         string
		l            limits
		failCarve    int
		wantCalls    int // timed, per side
		wantRecorded int // all calls, warm-up included
		wantErr      error
	}{
		{"counts", limits{warmup: 3, calls: 50, budget: time.Minute}, 0, 50, 106, nil},
		{"budget passed: stops after a whole pair at the check", limits{calls: 1000, budget: time.Nanosecond}, 0, 255, 510, nil},
		{"error", limits{warmup: 1, calls: 10}, 5, 0, 9, errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order = nil
			s, err := interleave(context.Background(), tt.l, rec(carveSide, tt.failCarve), rec(stubSide, 0))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if len(order) != tt.wantRecorded {
				t.Errorf("%d calls made, want %d", len(order), tt.wantRecorded)
			}
			for i, sd := range order {
				if want := []side{carveSide, stubSide}[i%2]; sd != want {
					t.Fatalf("call %d went to %c, want %c: not alternating", i, sd, want)
				}
			}
			if err != nil {
				return
			}
			if len(s.carve) != tt.wantCalls || len(s.stub) != tt.wantCalls {
				t.Errorf("%d carve and %d stub timings, want %d each", len(s.carve), len(s.stub), tt.wantCalls)
			}
			if diff := cmp.Diff(order[len(order)-len(s.order):], s.order); diff != "" {
				t.Errorf("recorded order differs from the calls (-calls +recorded):\n%s", diff)
			}
		})
	}
}

var errBoom = errors.New("boom")

func TestGoalNotes(t *testing.T) {
	tests := []struct {
		met, missed []string
		want        []string
	}{
		{[]string{"a (1.00x)"}, nil, []string{"Goal (carve's p50 within 1.2x the stub's): met for a (1.00x).", whereTimeGoes}},
		{[]string{"a (1.00x)"}, []string{"b (1.30x)"}, []string{
			"Goal (carve's p50 within 1.2x the stub's): met for a (1.00x).",
			"Goal (carve's p50 within 1.2x the stub's): not met for b (1.30x).", whereTimeGoes,
		}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, goalNotes(tt.met, tt.missed)); diff != "" {
			t.Errorf("goalNotes (-want +got):\n%s", diff)
		}
	}
}

func TestStubAllocate(t *testing.T) {
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a::1", "b::2"}}, {DevicesIds: []string{"c"}}}}
	resp, err := stubAllocate(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cr := range resp.GetContainerResponses() {
		got = append(got, cr.GetEnvs()[plugin.VisibleDevicesEnv])
	}
	if diff := cmp.Diff([]string{"a::1,b::2", "c"}, got); diff != "" {
		t.Errorf("stubAllocate (-want +got):\n%s", diff)
	}
}
