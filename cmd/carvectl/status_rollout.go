package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/rollout"
)

// rolloutStatus is the rollout of one profile ConfigMap: who holds the
// slots, who failed on the file's revision, and whether it is halted.
type rolloutStatus struct {
	// ConfigMap is namespace/name.
	ConfigMap string `json:"configMap"`
	// Revision names the file's content, as the agents do.
	Revision string `json:"revision,omitempty"`
	// MaxUnavailable and MaxFailures are the file's top-level rollout
	// (windows may have their own).
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
	MaxFailures    int    `json:"maxFailures,omitempty"`
	// Nodes counts the Nodes whose records name the ConfigMap, the nodes
	// a percentage maxUnavailable is of.
	Nodes int `json:"nodes"`
	// Slots are the slots that have a holder, live or expired, by name.
	Slots []slotStatus `json:"slots"`
	// Failed are the nodes failed on this revision, sorted.
	Failed []string `json:"failed,omitempty"`
	// Halted says the failed nodes reach maxFailures.
	Halted bool `json:"halted"`
	// Error says why the file or the Leases could not be read.
	Error string `json:"error,omitempty"`
}

// slotStatus is one rollout slot that has a holder. For an expired one
// (its holder stopped renewing it) the holder's Node is read: a waiting
// agent takes the slot over when that Node is gone or records no change
// in progress, and leaves it stuck otherwise.
type slotStatus struct {
	Name  string    `json:"name"`
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
	// Renewed is the holder's last renewal, Expires when that runs out.
	Renewed time.Time `json:"renewed"`
	Expires time.Time `json:"expires"`
	// Expired says Expires has passed: the holder no longer renews it.
	Expired bool `json:"expired,omitempty"`
	// HolderGone says the holder's Node does not exist (expired only).
	HolderGone bool `json:"holderGone,omitempty"`
	// HolderState is the holder's carve.dev/state (expired only).
	HolderState string `json:"holderState,omitempty"`
	// Stuck says the slot expired while the holder's record says a change
	// is in progress (since MidChangeSince, RFC 3339): no agent takes it
	// over, and it counts against maxUnavailable.
	Stuck          bool   `json:"stuck,omitempty"`
	MidChangeSince string `json:"midChangeSince,omitempty"`
	// HolderError says why the holder's Node or record could not be read.
	HolderError string `json:"holderError,omitempty"`
}

// nodeSlot is the slot a node holds, in its row of -o json: only what
// stays put while the holder renews it, so that a row changes when the
// slot does and not at each renewal.
type nodeSlot struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
	// ExpiredAt is when the slot expired, for one no longer renewed.
	ExpiredAt      *time.Time `json:"expiredAt,omitempty"`
	Stuck          bool       `json:"stuck,omitempty"`
	MidChangeSince string     `json:"midChangeSince,omitempty"`
}

// rolloutOf reads the ConfigMap ns/name and its rollout Leases.
func rolloutOf(ctx context.Context, cs kubernetes.Interface, ns, name string, now time.Time) rolloutStatus {
	out := rolloutStatus{ConfigMap: ns + "/" + name, Slots: []slotStatus{}}
	var policy *configs.Rollout
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		out.Error = fmt.Sprintf("read ConfigMap %s: %v", out.ConfigMap, err)
	default:
		data := cm.Data[carvev1.ConfigMapKey]
		out.Revision = rollout.Revision(data)
		if f, err := configs.Parse([]byte(data)); err == nil {
			policy = &f.Rollout
			out.MaxUnavailable, out.MaxFailures = f.Rollout.MaxUnavailable.String(), f.Rollout.MaxFailures
		} else {
			out.Error = fmt.Sprintf("ConfigMap %s key %s is invalid; the agents apply nothing from it", out.ConfigMap, carvev1.ConfigMapKey)
		}
	}
	if out.Nodes, err = membersOf(ctx, cs, out.ConfigMap); err != nil {
		out.Error = strings.TrimPrefix(out.Error+"; ", "; ") + err.Error()
	}
	list, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: carvev1.LeaseLabelConfigMap + "=" + rollout.LabelValue(name)})
	if err != nil {
		out.Error = strings.TrimPrefix(out.Error+"; ", "; ") + fmt.Sprintf("list rollout Leases in %s: %v", ns, err)
		return out
	}
	for i := range list.Items {
		out.add(&list.Items[i], now)
	}
	for i := range out.Slots {
		if out.Slots[i].Expired {
			out.Slots[i].readHolder(ctx, cs)
		}
	}
	slices.SortFunc(out.Slots, func(a, b slotStatus) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(out.Failed)
	out.Halted = policy != nil && len(out.Failed) >= policy.MaxFailures
	return out
}

// membersOf counts the Nodes whose records name the ConfigMap file
// ("namespace/name"), as the agents count the nodes of a percentage.
func membersOf(ctx context.Context, cs kubernetes.Interface, file string) (int, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: carvev1.LabelState})
	if err != nil {
		return 0, fmt.Errorf("list the Nodes of the rollout: %w", err)
	}
	n := 0
	for i := range list.Items {
		if carvev1.ReadsConfigMap(list.Items[i].Annotations, file) {
			n++
		}
	}
	return n, nil
}

// add counts one Lease.
func (r *rolloutStatus) add(l *coordinationv1.Lease, now time.Time) {
	s, ok := slotOfLease(l, now)
	if !ok {
		return
	}
	switch l.Labels[carvev1.LeaseLabelKind] {
	case rollout.KindFailure:
		if !s.Expired && l.Annotations[carvev1.LeaseAnnotationRevision] == r.Revision {
			r.Failed = append(r.Failed, s.Node)
		}
	case rollout.KindSlot:
		r.Slots = append(r.Slots, s)
	}
}

// slotOfLease reads a rollout Lease's holder and times at now; ok is
// false for one without a holder (a released slot). A Lease without a
// duration never expires.
func slotOfLease(l *coordinationv1.Lease, now time.Time) (slotStatus, bool) {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return slotStatus{}, false
	}
	s := slotStatus{Name: l.Name, Node: *l.Spec.HolderIdentity}
	if l.Spec.RenewTime != nil {
		s.Renewed = l.Spec.RenewTime.UTC()
	}
	s.Since, s.Expires = s.Renewed, s.Renewed
	if l.Spec.AcquireTime != nil {
		s.Since = l.Spec.AcquireTime.UTC()
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		s.Expires = s.Renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		s.Expired = !now.Before(s.Expires)
	}
	return s, true
}

// readHolder reads the Node of an expired slot's holder: whether it is
// gone, its state, and whether its record says a change is in progress,
// which makes the slot stuck.
func (s *slotStatus) readHolder(ctx context.Context, cs kubernetes.Interface) {
	n, err := cs.CoreV1().Nodes().Get(ctx, s.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.HolderGone = true
		return
	case err != nil:
		s.HolderError = fmt.Sprintf("read node %s: %v", s.Node, err)
		return
	}
	s.HolderState = n.Labels[carvev1.LabelState]
	a, ok := n.Annotations[carvev1.AnnotationRecord]
	if !ok {
		return
	}
	rec, err := carvev1.DecodeNodeRecord(a)
	if err != nil {
		s.HolderError = fmt.Sprintf("node %s: annotation %s: %v", s.Node, carvev1.AnnotationRecord, err)
		return
	}
	if rec.MidChange() {
		s.Stuck, s.MidChangeSince = true, rec.Change.Since
	}
}

// write prints the rollout below the node table.
func (r rolloutStatus) write(w io.Writer, now time.Time) {
	fmt.Fprintf(w, "\nRollout of %s", r.ConfigMap)
	if r.Revision != "" {
		fmt.Fprintf(w, " (revision %s", r.Revision)
		if r.MaxUnavailable != "" {
			fmt.Fprintf(w, "; maxUnavailable %s, maxFailures %d", r.MaxUnavailable, r.MaxFailures)
		}
		fmt.Fprint(w, ")")
	}
	plural := "s"
	if r.Nodes == 1 {
		plural = ""
	}
	fmt.Fprintf(w, ": %d node%s\n", r.Nodes, plural)
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
	if len(r.Slots) == 0 {
		fmt.Fprintln(w, "  no node holds a slot")
	}
	for _, s := range r.Slots {
		fmt.Fprintf(w, "  slot %s\n", s.describe(now))
	}
	switch {
	case r.Halted:
		fmt.Fprintf(w, "  HALTED: %d of at most %d nodes failed on this revision (%s); no further node starts a disruptive change until the file changes\n",
			len(r.Failed), r.MaxFailures, strings.Join(r.Failed, ", "))
	case len(r.Failed) > 0:
		fmt.Fprintf(w, "  failed on this revision: %s (halts at %d)\n", strings.Join(r.Failed, ", "), r.MaxFailures)
	}
}

// describe says who holds the slot and, for an expired one, whether
// another node may take it over.
func (s slotStatus) describe(now time.Time) string {
	if !s.Expired {
		return fmt.Sprintf("%s: %s, for %s", s.Name, s.Node, now.Sub(s.Since).Round(time.Second))
	}
	expired := fmt.Sprintf("expired %s ago", now.Sub(s.Expires).Round(time.Second))
	switch {
	case s.HolderGone:
		return fmt.Sprintf("%s: %s, %s; node %s is gone: free to take", s.Name, s.Node, expired, s.Node)
	case s.HolderError != "":
		return fmt.Sprintf("%s: %s, %s; %s", s.Name, s.Node, expired, s.HolderError)
	case s.Stuck:
		return fmt.Sprintf("%s: STUCK: %s (state %s) mid-change since %s, slot expired since %s (%s); "+
			"not taken over, it counts against maxUnavailable until the agent renews it or it is released (carvectl rollout release %s)",
			s.Name, s.Node, orDash(s.HolderState), sinceText(s.MidChangeSince, now), s.Expires.Format(time.RFC3339), expired, s.Node)
	}
	return fmt.Sprintf("%s: %s (state %s), %s, no change in progress: free to take", s.Name, s.Node, orDash(s.HolderState), expired)
}

// sinceText is an RFC 3339 time with how long ago it was, or the text as
// it is when it does not parse.
func sinceText(rfc3339 string, now time.Time) string {
	t, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		return fmt.Sprintf("%q", rfc3339)
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// slotOf is the first slot (by name) node holds, live or expired.
func (r rolloutStatus) slotOf(node string) (slotStatus, bool) {
	for _, s := range r.Slots {
		if s.Node == node {
			return s, true
		}
	}
	return slotStatus{}, false
}

// mark sets the row's part in the rollout: Rollout is "slot" while the
// node holds a live slot, "stuck" or "expired" for one it no longer
// renews, "failed" when it failed on the file's revision; Slot is the
// slot.
func (r rolloutStatus) mark(row nodeStatus) nodeStatus {
	row.Rollout, row.Slot = "", nil
	if s, ok := r.slotOf(row.Node); ok {
		row.Rollout, row.Slot = "slot", &nodeSlot{Name: s.Name, Since: s.Since}
		if s.Expired {
			row.Rollout, row.Slot.ExpiredAt = "expired", &s.Expires
			row.Slot.Stuck, row.Slot.MidChangeSince = s.Stuck, s.MidChangeSince
		}
		if s.Stuck {
			row.Rollout = "stuck"
		}
		return row
	}
	if slices.Contains(r.Failed, row.Node) {
		row.Rollout = "failed"
	}
	return row
}
