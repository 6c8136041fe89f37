package sim_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/partition/sim"
)

func TestInjectFault(t *testing.T) {
	errBoom := errors.New("boom")
	create := func(m *sim.Machine, gpu int) error {
		d, err := m.Device(gpu)
		if err != nil {
			return err
		}
		gi, err := d.CreateGPUInstance(4, partition.Placement{Start: 0, Size: 8})
		if err == nil {
			err = d.DestroyGPUInstance(gi.ID)
		}
		return err
	}
	type call struct {
		gpu  int
		want error
	}
	cases := []struct {
		name  string
		fault sim.Fault
		calls []call
	}{
		{"twice on GPU 1", sim.Fault{Call: "CreateGPUInstance", GPU: 1, Err: partition.ErrInsufficientResources, Times: 2},
			[]call{{0, nil}, {1, partition.ErrInsufficientResources}, {1, partition.ErrInsufficientResources}, {1, nil}, {1, nil}}},
		{"once on any GPU", sim.Fault{Call: "CreateGPUInstance", GPU: -1, Err: errBoom, Times: 1},
			[]call{{3, errBoom}, {1, nil}, {3, nil}}},
		{"until cleared", sim.Fault{Call: "CreateGPUInstance", GPU: 2, Err: partition.ErrInUse},
			[]call{{2, partition.ErrInUse}, {2, partition.ErrInUse}, {2, partition.ErrInUse}, {0, nil}}},
		{"Device lookup", sim.Fault{Call: "Device", GPU: 5, Err: partition.ErrNotFound, Times: 1},
			[]call{{5, partition.ErrNotFound}, {5, nil}}},
		{"other call untouched", sim.Fault{Call: "DestroyComputeInstance", GPU: -1, Err: errBoom},
			[]call{{0, nil}, {1, nil}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := open(t, "dgx-h100")
			for i := range 8 {
				enableMIG(t, device(t, m, i))
			}
			if err := m.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			for i, c := range tc.calls {
				err := create(m, c.gpu)
				wantErr(t, fmt.Sprintf("call %d on GPU %d", i, c.gpu), err, c.want)
			}
			m.ClearFaults()
			for gpu := range 8 {
				wantErr(t, "after ClearFaults", create(m, gpu), nil)
			}
		})
	}
}

func TestFaultedMutationChangesNothing(t *testing.T) {
	m := open(t, "dgx-a100")
	d := device(t, m, 0)
	if err := m.InjectFault(sim.Fault{Call: "SetMIGMode", GPU: 0, Err: partition.ErrNotSupported, Times: 1}); err != nil {
		t.Fatal(err)
	}
	err := d.SetMIGMode(partition.MIGEnabled)
	wantErr(t, "faulted SetMIGMode", err, partition.ErrNotSupported)
	if err == nil || !strings.Contains(err.Error(), "GPU 0") || !strings.Contains(err.Error(), "injected") {
		t.Errorf("error %v lacks context", err)
	}
	if _, pending := modes(t, d); pending != partition.MIGDisabled {
		t.Errorf("faulted SetMIGMode changed the pending mode")
	}
	ops := m.OpLog()
	if len(ops) != 1 || ops[0].Call != "SetMIGMode" || !errors.Is(ops[0].Err, partition.ErrNotSupported) {
		t.Errorf("op log %v, want the failed SetMIGMode", ops)
	}
}

func TestFaultsOnMachineCalls(t *testing.T) {
	cases := []struct {
		fault sim.Fault
		call  func(m *sim.Machine) error
	}{
		{sim.Fault{Call: "Init", GPU: -1, Err: partition.ErrLibraryNotFound, Times: 1}, func(m *sim.Machine) error {
			err := m.Init()
			if err == nil {
				_ = m.Shutdown()
			}
			return err
		}},
		{sim.Fault{Call: "DeviceCount", GPU: -1, Err: partition.ErrUninitialized, Times: 1}, func(m *sim.Machine) error {
			_, err := m.DeviceCount()
			return err
		}},
		{sim.Fault{Call: "Topology", GPU: 3, Err: partition.ErrNotSupported, Times: 1}, func(m *sim.Machine) error {
			_, err := m.Topology(0, 3)
			return err
		}},
		{sim.Fault{Call: "WatchXIDs", GPU: 2, Err: partition.ErrNotSupported, Times: 1}, func(m *sim.Machine) error {
			es, err := m.WatchXIDs([]int{1, 2})
			if err == nil {
				_ = es.Close()
			}
			return err
		}},
		{sim.Fault{Call: "Processes", GPU: 1, Err: partition.ErrNotSupported, Times: 1}, func(m *sim.Machine) error {
			d, err := m.Device(1)
			if err != nil {
				return err
			}
			_, err = d.Processes()
			return err
		}},
		{sim.Fault{Call: "Wait", GPU: 0, Err: partition.ErrNotSupported, Times: 1}, func(m *sim.Machine) error {
			es, err := m.WatchXIDs([]int{0})
			if err != nil {
				return err
			}
			defer es.Close()
			_, err = es.Wait(0)
			if errors.Is(err, partition.ErrTimeout) {
				return nil
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.fault.Call, func(t *testing.T) {
			m := open(t, "a30x4")
			if err := m.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "faulted", tc.call(m), tc.fault.Err)
			wantErr(t, "after the fault is used up", tc.call(m), nil)
		})
	}
}

func TestInjectFaultValidation(t *testing.T) {
	m := open(t, "a30x4")
	cases := []sim.Fault{
		{Call: "CreateGPUInstanceX", GPU: -1, Err: partition.ErrInUse},
		{Call: "Reset", GPU: -1},
		{Call: "Reset", GPU: 4, Err: partition.ErrInUse},
		{Call: "Reset", GPU: -2, Err: partition.ErrInUse},
		{Call: "Reset", GPU: 0, Err: partition.ErrInUse, Times: -1},
	}
	for _, f := range cases {
		wantErr(t, "InjectFault "+f.Call, m.InjectFault(f), partition.ErrInvalidArgument)
	}
	if err := device(t, m, 0).Reset(); err != nil {
		t.Errorf("rejected faults took effect: %v", err)
	}
}
