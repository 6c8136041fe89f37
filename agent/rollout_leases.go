package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/kubeclient"
	"github.com/carve-dev/carve/rollout"
)

// Defaults of a LeaseRollout.
const (
	// DefaultSlotDuration is how long a slot holds without renewal: an
	// agent that dies holding one loses it this long after its last
	// renewal, unless its node is mid-change (then the slot stays held
	// until the agent is back, the Node is gone, or an operator releases
	// it). The holder renews it every third of it.
	DefaultSlotDuration = 15 * time.Second
	// memberCacheFor is how long Acquire reuses the members it listed: a
	// percentage needs the count of nodes, which changes slowly.
	memberCacheFor = 30 * time.Second
	// renewRetry is how soon a failed renewal of the slot is tried again.
	renewRetry = time.Second
)

// ErrFenced is the error of a disruptive step the rollout does not allow
// now: this node holds no slot, or its last successful renewal is too old
// to be sure that no other node has taken the slot over.
var ErrFenced = errors.New("rollout slot not valid")

// LeaseRollout is Rollout over coordination.k8s.io Leases in the profile
// ConfigMap's namespace, all labelled with the ConfigMap's name and their
// kind (package rollout): slots, taken by create or by an update that
// names the resourceVersion it read, so that two agents never hold one;
// and a failure Lease per node whose change failed, naming the file's
// revision. The nodes a percentage is of are counted, when one needs the
// count, from the Nodes whose records name the file
// (carvev1.NodeRecord.ConfigMap), as a DaemonSet counts its nodes: a node
// whose agent died still counts until its Node is deleted. Nothing is
// written for them, so a fleet at rest writes nothing. Every update and delete of a Lease is
// conditional on the resourceVersion this agent last read of it, so that
// a write based on an old read (an agent whose slot was taken over while
// it was paused) never lands.
//
// A slot carries an ownerReference to its holder's Node, so that deleting
// the Node frees it. An expired slot is taken over only when its holder's
// Node is gone or its record (carvev1.NodeRecord.Change) shows no change
// in progress: a node mid-change is unavailable however long its agent is
// silent.
type LeaseRollout struct {
	// Client talks to the API server.
	Client kubeclient.Interface
	// Namespace and ConfigMap name the profile ConfigMap.
	Namespace, ConfigMap string
	// Node is this agent's node.
	Node string
	// SlotDuration defaults to DefaultSlotDuration.
	SlotDuration time.Duration
	// SlotMargin is how long before its slot would expire, counted from
	// its last successful renewal, this agent stops starting disruptive
	// steps (Fence); default a third of the slot's duration.
	SlotMargin time.Duration
	// Clock is the wall clock written into the Leases; default time.Now.
	Clock func() time.Time
	// Monotonic is the clock Fence measures the age of the last renewal
	// on; default time.Now, whose monotonic reading is immune to steps
	// of the wall clock.
	Monotonic func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// renewMu makes renewals of the slot (the renewer's, Confirm's) one
	// after the other: two at once would name the same version, and the
	// one refused would take the slot for lost.
	renewMu sync.Mutex
	mu      sync.Mutex
	// held is the slot Lease as this agent last wrote or read it, nil
	// when it holds none; renewed is when (Monotonic) the request of its
	// last successful write began; lost says why the last slot was lost.
	held      *coordinationv1.Lease
	renewed   time.Time
	lost      string
	stopRenew context.CancelFunc
	renewDone chan struct{}
	// nodeUID is this agent's Node's UID, for the slots' ownerReference.
	nodeUID types.UID
	// failure is the failure Lease this node wrote; failureKnown is set
	// once it is known whether there is one.
	failure      *coordinationv1.Lease
	failureKnown bool
	members      []rollout.Lease
	membersAt    time.Time
}

func (l *LeaseRollout) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}
	return l.Clock()
}

func (l *LeaseRollout) mono() time.Time {
	if l.Monotonic == nil {
		return time.Now()
	}
	return l.Monotonic()
}

func (l *LeaseRollout) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.Default()
	}
	return l.Logger
}

// slotDuration is the slot's duration in whole seconds, as a Lease keeps
// it: at least one.
func (l *LeaseRollout) slotDuration() time.Duration {
	if l.SlotDuration > 0 {
		return max(l.SlotDuration.Truncate(time.Second), time.Second)
	}
	return DefaultSlotDuration
}

// slotMargin is SlotMargin, or a third of the slot's duration.
func (l *LeaseRollout) slotMargin() time.Duration {
	if l.SlotMargin > 0 {
		return min(l.SlotMargin, l.slotDuration())
	}
	return l.slotDuration() / 3
}

// selector selects this file's Leases of the given kinds.
func (l *LeaseRollout) selector(kinds ...string) string {
	cm, _ := labels.NewRequirement(carvev1.LeaseLabelConfigMap, selection.Equals, []string{rollout.LabelValue(l.ConfigMap)})
	kind, _ := labels.NewRequirement(carvev1.LeaseLabelKind, selection.In, kinds)
	return labels.NewSelector().Add(*cm, *kind).String()
}

// list lists this file's Leases of the given kinds from the API server's
// cache (resourceVersion 0: a slot is taken by a create or a conditional
// update, so a stale list can lose a race but never double-book).
func (l *LeaseRollout) list(ctx context.Context, kinds ...string) ([]coordinationv1.Lease, error) {
	list, err := l.Client.Leases(l.Namespace).List(ctx, metav1.ListOptions{LabelSelector: l.selector(kinds...), ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list rollout Leases in %s: %w", l.Namespace, err)
	}
	return list.Items, nil
}

// raceTries is how many times Acquire reads and tries again at once when
// another node took the slot it chose: other slots may be free.
const raceTries = 3

// Acquire implements Rollout.
func (l *LeaseRollout) Acquire(ctx context.Context, policy configs.Rollout, revision string) (rollout.Decision, error) {
	for try := 1; ; try++ {
		dec, lost, err := l.tryAcquire(ctx, policy, revision)
		if err != nil || !lost || try == raceTries {
			return dec, err
		}
	}
}

// tryAcquire reads the Leases, decides, and takes the chosen slot (or
// renews its own); lost reports a race lost to another node.
func (l *LeaseRollout) tryAcquire(ctx context.Context, policy configs.Rollout, revision string) (dec rollout.Decision, lost bool, err error) {
	raw, err := l.list(ctx, rollout.KindSlot, rollout.KindFailure)
	if err != nil {
		return rollout.Decision{}, false, err
	}
	now := l.now()
	leases := l.views(ctx, raw, now)
	if policy.MaxUnavailable.Percent {
		members, err := l.memberNodes(ctx)
		if err != nil {
			return rollout.Decision{}, false, err
		}
		leases = append(leases, members...)
	}
	dec = rollout.Decide(leases, rollout.Request{Node: l.Node, Policy: policy, Revision: revision, Now: now},
		func(i int) string { return rollout.SlotName(l.ConfigMap, i) })
	if !dec.Granted {
		return dec, false, nil
	}
	var existing *coordinationv1.Lease
	for i := range raw {
		if raw[i].Name == dec.Slot {
			existing = &raw[i]
		}
	}
	if dec.Held && l.holds(dec.Slot) {
		return dec, false, nil
	}
	err = l.take(ctx, dec.Slot, existing, revision, now)
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		// Another node took it first, or this node's own slot changed
		// since the (cached) list: read again.
		dec.Granted, dec.Held, dec.Slot = false, false, ""
		return dec, true, nil
	}
	if err != nil {
		return rollout.Decision{}, false, err
	}
	return dec, false, nil
}

// views are the accounting's view of the listed Leases, each expired slot
// of another node marked Stuck when that node is still mid-change; it
// also notes whether this node has a failure Lease.
func (l *LeaseRollout) views(ctx context.Context, raw []coordinationv1.Lease, now time.Time) []rollout.Lease {
	leases := make([]rollout.Lease, 0, len(raw))
	mine := rollout.FailureName(l.ConfigMap, l.Node)
	var failure *coordinationv1.Lease
	for i := range raw {
		v := leaseView(&raw[i])
		if v.Kind == rollout.KindSlot && v.Holder != "" && v.Holder != l.Node && !v.Live(now) {
			v.Stuck = l.holderMidChange(ctx, &raw[i], v.Holder)
		}
		leases = append(leases, v)
		if raw[i].Name == mine {
			failure = &raw[i]
		}
	}
	// The list says whether this node has a failure Lease, so that a
	// success need not delete one that is not there. A list without it is
	// believed only before this agent wrote one: a list from the cache
	// may lag behind its own write.
	l.mu.Lock()
	if failure != nil {
		l.failure, l.failureKnown = failure, true
	} else if !l.failureKnown {
		l.failureKnown = true
	}
	l.mu.Unlock()
	return leases
}

// Report implements Rollout.
func (l *LeaseRollout) Report(ctx context.Context, policy configs.Rollout, revision string, failed bool) (bool, error) {
	if failed {
		if err := l.writeFailure(ctx, revision); err != nil {
			return false, err
		}
		raw, err := l.list(ctx, rollout.KindFailure)
		if err != nil {
			return false, err
		}
		n := 0
		for i := range raw {
			if f := leaseView(&raw[i]); f.Revision == revision && f.Holder != l.Node {
				n++
			}
		}
		return n+1 >= policy.MaxFailures, nil
	}
	return false, l.clearFailure(ctx)
}

// Recovered implements Rollout.
func (l *LeaseRollout) Recovered(ctx context.Context) error { return l.clearFailure(ctx) }

// writeFailure creates or updates this node's failure Lease.
func (l *LeaseRollout) writeFailure(ctx context.Context, revision string) error {
	name := rollout.FailureName(l.ConfigMap, l.Node)
	leases := l.Client.Leases(l.Namespace)
	now := metav1.NewMicroTime(l.now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.Namespace,
			Labels:      map[string]string{carvev1.LeaseLabelConfigMap: rollout.LabelValue(l.ConfigMap), carvev1.LeaseLabelKind: rollout.KindFailure},
			Annotations: map[string]string{carvev1.LeaseAnnotationRevision: revision}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new(l.Node), AcquireTime: &now, RenewTime: &now},
	}
	got, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *coordinationv1.Lease
		if cur, err = leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
			lease.ResourceVersion = cur.ResourceVersion
			got, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("record the failed change in Lease %s: %w", name, err)
	}
	l.mu.Lock()
	l.failure, l.failureKnown = got, true
	l.mu.Unlock()
	return nil
}

// clearFailure deletes this node's failure Lease, if there is one, on
// condition that it is the version last read (read again once when the
// version known is stale).
func (l *LeaseRollout) clearFailure(ctx context.Context) error {
	l.mu.Lock()
	known, cur := l.failureKnown, l.failure
	l.mu.Unlock()
	if known && cur == nil {
		return nil
	}
	name := rollout.FailureName(l.ConfigMap, l.Node)
	err := l.deleteLease(ctx, name, cur, func(*coordinationv1.Lease) bool { return true })
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the failure Lease %s: %w", name, err)
	}
	l.mu.Lock()
	l.failure, l.failureKnown = nil, true
	l.mu.Unlock()
	return nil
}

// memberNodes returns, as member Leases that never expire, the Nodes
// whose records name this file, listed from the API server's cache at
// most every memberCacheFor. Only Nodes with carve's state label are
// read: every Node an agent has recorded has one.
func (l *LeaseRollout) memberNodes(ctx context.Context) ([]rollout.Lease, error) {
	l.mu.Lock()
	if l.members != nil && l.now().Sub(l.membersAt) < memberCacheFor {
		defer l.mu.Unlock()
		return l.members, nil
	}
	l.mu.Unlock()
	list, err := l.Client.Nodes().List(ctx, metav1.ListOptions{LabelSelector: carvev1.LabelState, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list the Nodes of the rollout: %w", err)
	}
	file := l.Namespace + "/" + l.ConfigMap
	members := []rollout.Lease{}
	for i := range list.Items {
		n := &list.Items[i]
		if !carvev1.ReadsConfigMap(n.Annotations, file) {
			continue
		}
		members = append(members, rollout.Lease{Name: n.Name, Kind: rollout.KindMember, Holder: n.Name})
	}
	l.mu.Lock()
	l.members, l.membersAt = members, l.now()
	l.mu.Unlock()
	return members, nil
}

// Run removes the member Lease an agent of an earlier version kept for
// this node (those versions counted nodes by such Leases), then waits
// until ctx ends and stops renewing a slot it holds without releasing it:
// a change cut short is still under way on the GPUs, and its slot stays
// held (expired, but not taken over while the node's record shows the
// change) until the agent comes back and goes on with it.
func (l *LeaseRollout) Run(ctx context.Context) error {
	defer func() {
		l.mu.Lock()
		l.stopLocked()
		l.mu.Unlock()
	}()
	if err := l.removeOldMember(ctx); err != nil && ctx.Err() == nil {
		l.logger().Warn("could not remove the member Lease of an earlier carve-agent; it expires by itself", "err", err)
	}
	<-ctx.Done()
	return nil
}

// removeOldMember deletes this node's member Lease, conditional on the
// version read, if there is one.
func (l *LeaseRollout) removeOldMember(ctx context.Context) error {
	name := rollout.MemberName(l.ConfigMap, l.Node)
	leases := l.Client.Leases(l.Namespace)
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read member Lease %s: %w", name, err)
	}
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("remove member Lease %s: %w", name, err)
	}
	return nil
}

// leaseView is the rollout accounting's view of a Lease: its kind from the
// carve.dev/rollout label, the revision from its annotation, holder and
// times from its spec.
func leaseView(l *coordinationv1.Lease) rollout.Lease {
	out := rollout.Lease{Name: l.Name, Kind: l.Labels[carvev1.LeaseLabelKind], Revision: l.Annotations[carvev1.LeaseAnnotationRevision]}
	if h := l.Spec.HolderIdentity; h != nil {
		out.Holder = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		out.Acquired = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		out.Renewed = t.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		out.Duration = time.Duration(*d) * time.Second
	}
	return out
}
