package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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
	// Nodes counts the agents' member Leases.
	Nodes int `json:"nodes"`
	// Slots are the live slots, by name.
	Slots []slotStatus `json:"slots"`
	// Failed are the nodes failed on this revision, sorted.
	Failed []string `json:"failed,omitempty"`
	// Halted says the failed nodes reach maxFailures.
	Halted bool `json:"halted"`
	// Error says why the file or the Leases could not be read.
	Error string `json:"error,omitempty"`
}

// slotStatus is one held rollout slot.
type slotStatus struct {
	Name    string    `json:"name"`
	Node    string    `json:"node"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
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
	list, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: carvev1.LeaseLabelConfigMap + "=" + rollout.LabelValue(name)})
	if err != nil {
		out.Error = strings.TrimPrefix(out.Error+"; ", "; ") + fmt.Sprintf("list rollout Leases in %s: %v", ns, err)
		return out
	}
	for i := range list.Items {
		out.add(&list.Items[i], now)
	}
	slices.SortFunc(out.Slots, func(a, b slotStatus) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(out.Failed)
	out.Halted = policy != nil && len(out.Failed) >= policy.MaxFailures
	return out
}

// add counts one Lease.
func (r *rolloutStatus) add(l *coordinationv1.Lease, now time.Time) {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	renewed, dur := time.Time{}, time.Duration(0)
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	live := holder != "" && (dur == 0 || now.Before(renewed.Add(dur)))
	if !live {
		return
	}
	switch l.Labels[carvev1.LeaseLabelKind] {
	case rollout.KindMember:
		r.Nodes++
	case rollout.KindFailure:
		if l.Annotations[carvev1.LeaseAnnotationRevision] == r.Revision {
			r.Failed = append(r.Failed, holder)
		}
	case rollout.KindSlot:
		since := renewed
		if l.Spec.AcquireTime != nil {
			since = l.Spec.AcquireTime.Time
		}
		r.Slots = append(r.Slots, slotStatus{Name: l.Name, Node: holder, Since: since.UTC(), Expires: renewed.Add(dur).UTC()})
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
		fmt.Fprintf(w, "  slot %s: %s, for %s\n", s.Name, s.Node, now.Sub(s.Since).Round(time.Second))
	}
	switch {
	case r.Halted:
		fmt.Fprintf(w, "  HALTED: %d of at most %d nodes failed on this revision (%s); no further node starts a disruptive change until the file changes\n",
			len(r.Failed), r.MaxFailures, strings.Join(r.Failed, ", "))
	case len(r.Failed) > 0:
		fmt.Fprintf(w, "  failed on this revision: %s (halts at %d)\n", strings.Join(r.Failed, ", "), r.MaxFailures)
	}
}

// partOf is a node's part in the rollout: "slot", "failed", or "".
func (r rolloutStatus) partOf(node string) string {
	for _, s := range r.Slots {
		if s.Node == node {
			return "slot"
		}
	}
	if slices.Contains(r.Failed, node) {
		return "failed"
	}
	return ""
}
