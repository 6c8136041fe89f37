package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/carve-dev/carve/partition"
)

// long is a timeout no test should reach; a test that does fails by
// timing out, never by measuring time.
const long = time.Hour

func TestXIDDelivery(t *testing.T) {
	m := open(t, "dgx-h100")
	watchAll, err := m.WatchXIDs([]int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	defer watchAll.Close()
	watch3, err := m.WatchXIDs([]int{3})
	if err != nil {
		t.Fatal(err)
	}
	defer watch3.Close()
	watchNone, err := m.WatchXIDs(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer watchNone.Close()

	raises := []struct {
		gpu        int
		xid        uint64
		giID, ciID int
	}{
		{3, 79, -1, -1},
		{5, 48, 1, 0},
		{3, 94, 2, 0},
	}
	for _, r := range raises {
		if err := m.RaiseXID(r.gpu, r.xid, r.giID, r.ciID); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		set  partition.EventSet
		want []int // indexes into raises, in order
	}{
		{"all GPUs", watchAll, []int{0, 1, 2}},
		{"GPU 3", watch3, []int{0, 2}},
		{"no GPU", watchNone, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, i := range tc.want {
				ev, err := tc.set.Wait(long)
				if err != nil {
					t.Fatal(err)
				}
				r := raises[i]
				want := uuidOf(t, device(t, m, r.gpu))
				if ev.UUID != want || ev.XID != r.xid || ev.GIID != r.giID || ev.CIID != r.ciID || ev.Time.IsZero() {
					t.Errorf("event %+v, want GPU %d XID %d on %d/%d", ev, r.gpu, r.xid, r.giID, r.ciID)
				}
			}
			_, err := tc.set.Wait(0)
			wantErr(t, "drained", err, partition.ErrTimeout)
		})
	}
	wantErr(t, "RaiseXID bad GPU", m.RaiseXID(8, 79, -1, -1), partition.ErrInvalidArgument)
	_, err = m.WatchXIDs([]int{8})
	wantErr(t, "WatchXIDs bad GPU", err, partition.ErrInvalidArgument)
}

func TestXIDWaitTimesOut(t *testing.T) {
	m := open(t, "a30x4")
	es, err := m.WatchXIDs([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	for _, timeout := range []time.Duration{0, -time.Second, time.Millisecond} {
		_, err := es.Wait(timeout)
		wantErr(t, "Wait("+timeout.String()+")", err, partition.ErrTimeout)
	}
}

func TestXIDBlockedWaiter(t *testing.T) {
	m := open(t, "a30x4")
	es, err := m.WatchXIDs([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	got := make(chan error, 1)
	go func() {
		ev, err := es.Wait(long)
		if err == nil && ev.XID != 31 {
			err = errors.New("wrong event")
		}
		got <- err
	}()
	if err := m.RaiseXID(1, 31, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestXIDCloseUnblocksWaiters(t *testing.T) {
	m := open(t, "a30x4")
	es, err := m.WatchXIDs([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	got := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := es.Wait(long)
			got <- err
		}()
	}
	if err := es.Close(); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		err := <-got
		if err == nil || errors.Is(err, partition.ErrTimeout) {
			t.Errorf("waiter after Close: %v, want a closed error", err)
		}
	}
	if err := es.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := m.RaiseXID(0, 79, -1, -1); err != nil {
		t.Errorf("RaiseXID with a closed set: %v", err)
	}
	_, err = es.Wait(0)
	wantErr(t, "Wait after Close", err, partition.ErrInvalidArgument)
}

func TestXIDManyWaitersEachGetOne(t *testing.T) {
	m := open(t, "dgx-a100")
	es, err := m.WatchXIDs([]int{2})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	const n = 8
	got := make(chan uint64, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			ev, err := es.Wait(long)
			if err != nil {
				errs <- err
				return
			}
			got <- ev.XID
		}()
	}
	for i := range n {
		if err := m.RaiseXID(2, uint64(100+i), -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	for range n {
		select {
		case x := <-got:
			if seen[x] {
				t.Errorf("XID %d delivered twice", x)
			}
			seen[x] = true
		case err := <-errs:
			t.Fatal(err)
		}
	}
}
