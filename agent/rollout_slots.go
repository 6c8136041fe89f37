package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/rollout"
)

// holds reports whether this agent holds the slot name now (taken or
// renewed by this process and not lost since).
func (l *LeaseRollout) holds(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held != nil && l.held.Name == name
}

// holderMidChange reports whether the holder of the expired slot lease is
// still mid-change, as its Node's record says: then the slot is not taken
// over. A Node that is gone (or was made anew since it took the slot)
// holds nothing. A Node that cannot be read counts as mid-change: a slot
// is never taken over on a guess.
func (l *LeaseRollout) holderMidChange(ctx context.Context, lease *coordinationv1.Lease, holder string) bool {
	n, err := l.Client.Nodes().Get(ctx, holder, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		l.logger().Warn("cannot read the Node of an expired rollout slot's holder; the slot counts as held", "lease", lease.Name, "holder", holder, "err", err)
		return true
	}
	for _, ref := range lease.OwnerReferences {
		if ref.Kind == "Node" && ref.Name == holder && ref.UID != n.UID {
			return false
		}
	}
	enc, ok := n.Annotations[carvev1.AnnotationRecord]
	if !ok {
		return false
	}
	rec, err := carvev1.DecodeNodeRecord(enc)
	if err != nil {
		l.logger().Warn("the record of an expired rollout slot's holder is unreadable; the slot counts as held", "lease", lease.Name, "holder", holder, "err", err)
		return true
	}
	return rec.MidChange()
}

// ownerRef is the ownerReference a slot carries: this agent's Node, so
// that deleting the Node frees the slot. The Node's UID is read once.
func (l *LeaseRollout) ownerRef(ctx context.Context) (metav1.OwnerReference, error) {
	l.mu.Lock()
	uid := l.nodeUID
	l.mu.Unlock()
	if uid == "" {
		n, err := l.Client.Nodes().Get(ctx, l.Node, metav1.GetOptions{})
		if err != nil {
			return metav1.OwnerReference{}, fmt.Errorf("read Node %s for the rollout slot's owner: %w", l.Node, err)
		}
		uid = n.UID
		l.mu.Lock()
		l.nodeUID = uid
		l.mu.Unlock()
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: l.Node, UID: uid}, nil
}

// take writes this node into the slot and holds it: a create when no
// Lease has the name, else an update, conditional on the resourceVersion
// read, of the free, expired or own slot it read.
func (l *LeaseRollout) take(ctx context.Context, name string, existing *coordinationv1.Lease, revision string, now time.Time) error {
	owner, err := l.ownerRef(ctx)
	if err != nil {
		return err
	}
	lease := existing.DeepCopy()
	if lease == nil {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.Namespace}}
	}
	lease.Labels = map[string]string{carvev1.LeaseLabelConfigMap: rollout.LabelValue(l.ConfigMap), carvev1.LeaseLabelKind: rollout.KindSlot}
	lease.Annotations = map[string]string{carvev1.LeaseAnnotationRevision: revision}
	lease.OwnerReferences = []metav1.OwnerReference{owner}
	t := metav1.NewMicroTime(now)
	acquired := &t
	if existing != nil && existing.Spec.HolderIdentity != nil && *existing.Spec.HolderIdentity == l.Node && existing.Spec.AcquireTime != nil {
		acquired = existing.Spec.AcquireTime
	}
	lease.Spec = coordinationv1.LeaseSpec{
		HolderIdentity: new(l.Node), LeaseDurationSeconds: new(int32(l.slotDuration() / time.Second)),
		AcquireTime: acquired, RenewTime: &t,
	}
	leases := l.Client.Leases(l.Namespace)
	start := l.mono()
	var got *coordinationv1.Lease
	if existing == nil {
		got, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		got, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	l.hold(got, start)
	return nil
}

// hold records the slot Lease this node holds, renewed at start, and
// keeps it renewed.
func (l *LeaseRollout) hold(lease *coordinationv1.Lease, start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.held, l.renewed, l.lost = lease.DeepCopy(), start, ""
	ctx, cancel := context.WithCancel(context.Background())
	l.stopRenew, l.renewDone = cancel, make(chan struct{})
	go l.renew(ctx, l.renewDone)
}

// renew renews the held slot every third of its duration (a failed
// renewal again after renewRetry) until stopped, or until the slot is
// lost: another node or an operator wrote it since.
func (l *LeaseRollout) renew(ctx context.Context, done chan struct{}) {
	defer close(done)
	next := l.slotDuration() / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		err := l.renewOnce(ctx)
		switch {
		case err == nil:
			next = l.slotDuration() / 3
		case ctx.Err() != nil:
			return
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			return
		default:
			next = min(renewRetry, l.slotDuration()/3)
		}
	}
}

// renewOnce renews the held slot now, on condition that it is still the
// version this agent last wrote; a Conflict or NotFound loses it.
func (l *LeaseRollout) renewOnce(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	if l.held == nil {
		l.mu.Unlock()
		return fmt.Errorf("%w: this node holds no rollout slot", ErrFenced)
	}
	lease := l.held.DeepCopy()
	l.mu.Unlock()
	lease.Spec.RenewTime = new(metav1.NewMicroTime(l.now()))
	start := l.mono()
	renewed, err := l.Client.Leases(l.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil || l.held.Name != lease.Name || l.held.ResourceVersion != lease.ResourceVersion {
		return fmt.Errorf("%w: the rollout slot changed while it was renewed", ErrFenced)
	}
	switch {
	case err == nil:
		l.held, l.renewed = renewed, start
		return nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		l.held = nil
		l.lost = fmt.Sprintf("the rollout slot %s was taken over or released since this agent last renewed it", lease.Name)
		l.logger().Warn("lost the rollout slot", "lease", lease.Name, "err", err)
	default:
		if ctx.Err() == nil {
			l.logger().Warn("could not renew the rollout slot", "lease", lease.Name, "err", err)
		}
	}
	return fmt.Errorf("renew rollout slot %s: %w", lease.Name, err)
}

// stopLocked stops renewing and waits for the renewer; l.mu is held.
func (l *LeaseRollout) stopLocked() {
	if l.stopRenew == nil {
		return
	}
	l.stopRenew()
	done := l.renewDone
	l.stopRenew, l.renewDone = nil, nil
	l.mu.Unlock()
	<-done
	l.mu.Lock()
}

// Holding implements Rollout.
func (l *LeaseRollout) Holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held != nil
}

// Slot implements Rollout.
func (l *LeaseRollout) Slot() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ""
	}
	return l.held.Name
}

// Fence implements Rollout: nil while this node holds its slot and its
// last successful renewal, by this agent's monotonic clock, is younger
// than the slot's duration less the margin.
func (l *LeaseRollout) Fence() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		why := "this node holds no rollout slot"
		if l.lost != "" {
			why = l.lost
		}
		return fmt.Errorf("%w: %s", ErrFenced, why)
	}
	age, limit := l.mono().Sub(l.renewed), l.slotDuration()-l.slotMargin()
	if age >= limit {
		return fmt.Errorf("%w: the rollout slot %s was last renewed %s ago; a disruptive step starts only within %s of a renewal (the slot's %s less a margin of %s)",
			ErrFenced, l.held.Name, age.Round(time.Millisecond), limit, l.slotDuration(), l.slotMargin())
	}
	return nil
}

// Confirm implements Rollout: it renews the slot now, conditionally.
func (l *LeaseRollout) Confirm(ctx context.Context) error {
	if err := l.renewOnce(ctx); err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return nil
}

// Release implements Rollout: it deletes the slot Lease, on condition that
// it is still the version this node last wrote. When it is not, the slot
// is read again: one another node took over, or released and took anew,
// is left alone; one that still names this node (a renewal whose answer
// never came, cut short as the slot was released, wrote it) is deleted at
// the version read.
func (l *LeaseRollout) Release(ctx context.Context) error {
	l.mu.Lock()
	l.stopLocked()
	lease := l.held
	l.held = nil
	l.mu.Unlock()
	if lease == nil {
		return nil
	}
	err := l.deleteLease(ctx, lease.Name, lease, func(cur *coordinationv1.Lease) bool {
		return cur.UID == lease.UID && leaseView(cur).Holder == l.Node
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("release rollout slot %s: %w", lease.Name, err)
	}
	return nil
}

// deleteLease deletes the Lease name on condition that it is still the
// version cur (read first when cur is nil). When it is not (a Conflict),
// it reads the Lease again, once, and deletes it at the version read
// while mine says it is still this node's; one mine disowns is left alone
// (nil).
func (l *LeaseRollout) deleteLease(ctx context.Context, name string, cur *coordinationv1.Lease, mine func(*coordinationv1.Lease) bool) error {
	leases := l.Client.Leases(l.Namespace)
	var err error
	for try := range 2 {
		if cur == nil || try > 0 {
			if cur, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
			if !mine(cur) {
				return nil
			}
		}
		err = leases.Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}
