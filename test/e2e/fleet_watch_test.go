package e2e

// The outside view of a fleet's rollout: how many nodes are mid-change at
// once, counted from the Node objects as any client of the API server
// sees them, with no help from the agents. TestRolloutFleet and
// TestChaosRolloutFleet share it.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/test/harness"
)

// midSpan is a time a node was seen mid-change: from when its record was
// first seen with a change to when it was first seen without one (zero
// while it still has one). since is when the record says the change
// began (zero when it does not parse).
type midSpan struct {
	from, to, since time.Time
}

// watchDelay is how much earlier than the watch saw it a change may have
// begun, as its record says: the informer's (or the List's) delay.
const watchDelay = time.Second

// begin is when the span began, allowing for the watch's delay: the
// record's since, but no more than watchDelay before the watch saw it.
func (s midSpan) begin() time.Time {
	if s.since.IsZero() || !s.since.Before(s.from) {
		return s.from
	}
	return maxTime(s.since, s.from.Add(-watchDelay))
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// midEvent is one entry of a midWatch's timeline: a node seen entering or
// leaving a change, and how many nodes were mid-change after it.
type midEvent struct {
	at     time.Time
	node   string
	mid    bool
	change string // the change's since, profile and slot when mid
	count  int
	via    string // what showed it: the watch's event or a List, and at which revision
}

// midWatch counts, from outside the agents, the nodes of a fleet whose
// record (the carve.dev/partition annotation) says they are mid-change,
// and keeps the most seen at once, every sample over a bound, and a
// timeline. It follows the Nodes with a plain watch, whose events come
// one by one in the API server's order, from the revision its view stands
// at (at); when the watch cannot go on from there (the API server was
// stopped, the revision was compacted), a List, a snapshot at one
// revision, is taken in whole and the watch starts again from it. So
// every count is of a state the API server really had, at revision at.
// (An informer is not used: after it lists again it hands out the listed
// objects one by one in the list's order, not the order they changed in,
// and a count in between mixes revisions.)
type midWatch struct {
	bound int
	start time.Time
	// cs and selector read the Nodes again, at a sample's revision
	// exactly, to confirm it (confirm); cs is nil in unit tests.
	cs       kubernetes.Interface
	selector string

	mu       sync.Mutex
	at       uint64
	mid      map[string]*carvev1.ChangeRecord
	spans    map[string][]midSpan
	most     int
	mostRev  uint64 // the revision most was first counted at
	over     []overSample
	timeline []midEvent
}

// overSample is a count over the bound: what was counted, and the
// revision of the API server it was counted at.
type overSample struct {
	text string
	rev  uint64
}

// watchMidChange starts following the Nodes selector matches until ctx
// ends. bound is the most nodes that may be mid-change at once; retry
// paces the attempts to watch or list again while the API server is down.
func watchMidChange(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string, bound int, retry time.Duration) *midWatch {
	t.Helper()
	w := &midWatch{bound: bound, start: time.Now(), cs: cs, selector: selector, mid: map[string]*carvev1.ChangeRecord{}, spans: map[string][]midSpan{}}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("list the fleet's Nodes: %v", err)
	}
	w.snapshot(list, time.Now())
	go w.follow(ctx, retry)
	return w
}

// follow keeps the view current until ctx ends: a watch from the view's
// revision, then another; when one cannot start or ends in an error, a
// List first. While the API server is down, each try waits retry.
func (w *midWatch) follow(ctx context.Context, retry time.Duration) {
	for ctx.Err() == nil {
		began := time.Now()
		err := w.watchFrom(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && time.Since(began) > time.Second:
			continue
		case err == nil:
			sleepCtx(ctx, retry)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, lerr := w.cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{LabelSelector: w.selector})
		cancel()
		if lerr != nil {
			sleepCtx(ctx, retry)
			continue
		}
		w.snapshot(list, time.Now())
	}
}

// watchFrom watches the Nodes from the view's revision and takes in each
// event, in order, until the watch ends: nil when it ended by itself
// (the next one goes on from where it stopped), an error when it could
// not start or the API server ended it with one (a List comes first).
func (w *midWatch) watchFrom(ctx context.Context) error {
	w.mu.Lock()
	rv := strconv.FormatUint(w.at, 10)
	w.mu.Unlock()
	wi, err := w.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: w.selector, ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			n, _ := ev.Object.(*corev1.Node)
			w.observe(n, ev.Type == watch.Deleted, time.Now())
		case watch.Bookmark:
			if n, ok := ev.Object.(*corev1.Node); ok {
				w.advance(n.ResourceVersion)
			}
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		}
	}
	return nil
}

// advance moves the view to revision rv, which a bookmark says the watch
// has given every event up to.
func (w *midWatch) advance(rv string) {
	r, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at = max(w.at, r)
}

// snapshot takes in a List, the API server's state at the List's
// revision, unless the view stands at a newer one: each node as listed, a
// node not listed gone; then counts once.
func (w *midWatch) snapshot(list *corev1.NodeList, at time.Time) {
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rv <= w.at {
		return
	}
	w.at = rv
	first := len(w.timeline)
	listed := map[string]bool{}
	via := "list at " + list.ResourceVersion
	for i := range list.Items {
		n := &list.Items[i]
		listed[n.Name] = true
		w.setLocked(n.Name, changeOf(n, false), at, via)
	}
	for node := range w.mid {
		if !listed[node] {
			w.setLocked(node, nil, at, via)
		}
	}
	for i := first; i < len(w.timeline); i++ {
		w.timeline[i].count = len(w.mid)
	}
	w.countLocked(at)
}

// changeOf is the change n's record says is in progress (nil when none,
// when the record cannot be read, or when n is gone).
func changeOf(n *corev1.Node, gone bool) *carvev1.ChangeRecord {
	if gone {
		return nil
	}
	if rec, err := harness.RecordOf(n); err == nil {
		return rec.Change
	}
	return nil
}

// observe takes in a watch event for a node, seen at at, unless the view
// stands at a newer revision (a List has covered it); gone says the node
// was deleted, which is taken in whatever its revision. Then it counts.
func (w *midWatch) observe(n *corev1.Node, gone bool, at time.Time) {
	if n == nil {
		return
	}
	change := changeOf(n, gone)
	w.mu.Lock()
	defer w.mu.Unlock()
	if rv, err := strconv.ParseUint(n.ResourceVersion, 10, 64); err == nil && !gone {
		if rv <= w.at {
			return
		}
		w.at = rv
	}
	if w.setLocked(n.Name, change, at, "event at "+n.ResourceVersion) {
		w.countLocked(at)
	}
}

// setLocked sets node's change in progress (nil: none) and reports
// whether that changed whether it is mid-change; w.mu is held.
func (w *midWatch) setLocked(node string, change *carvev1.ChangeRecord, at time.Time, via string) bool {
	_, was := w.mid[node]
	if change != nil {
		w.mid[node] = change
	} else {
		delete(w.mid, node)
	}
	if was == (change != nil) {
		return false
	}
	w.mark(node, change, at, via)
	return true
}

// mark records that node entered (change not nil) or left a change at at;
// w.mu is held.
func (w *midWatch) mark(node string, change *carvev1.ChangeRecord, at time.Time, via string) {
	ev := midEvent{at: at, node: node, mid: change != nil, count: len(w.mid), via: via}
	spans := w.spans[node]
	if change != nil {
		ev.change = fmt.Sprintf("since %s, profile %s, slot %s", change.Since, change.Profile, change.Slot)
		since, _ := time.Parse(time.RFC3339Nano, change.Since)
		w.spans[node] = append(spans, midSpan{from: at, since: since})
	} else if len(spans) > 0 {
		spans[len(spans)-1].to = at
	}
	w.timeline = append(w.timeline, ev)
}

// countLocked counts the nodes mid-change, keeps the most, and notes a
// count over the bound with the nodes counted; w.mu is held.
func (w *midWatch) countLocked(at time.Time) {
	n := len(w.mid)
	if n > w.most {
		w.most, w.mostRev = n, w.at
	}
	if w.bound > 0 && n > w.bound {
		w.over = append(w.over, overSample{rev: w.at,
			text: fmt.Sprintf("%s: %d nodes mid-change (bound %d) at revision %d: %s", w.since(at), n, w.bound, w.at, w.describeLocked())})
	}
}

// describeLocked lists the nodes mid-change with their changes; w.mu is
// held.
func (w *midWatch) describeLocked() string {
	var out []string
	for node, c := range w.mid {
		out = append(out, fmt.Sprintf("%s (since %s, profile %s, slot %s)", node, c.Since, c.Profile, c.Slot))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// since is at as an offset from the start of the watch.
func (w *midWatch) since(at time.Time) string {
	return "t+" + at.Sub(w.start).Round(10*time.Millisecond).String()
}

// midPhase is what a midWatch saw between two takes.
type midPhase struct {
	// most is the most nodes seen mid-change at once, first at revision
	// mostRev.
	most    int
	mostRev uint64
	// over are the samples over the bound.
	over []overSample
	// timeline is every node seen entering or leaving a change.
	timeline []midEvent
}

// take returns what w saw since the last take, and starts again from the
// nodes mid-change now.
func (w *midWatch) take() midPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := midPhase{most: w.most, mostRev: w.mostRev, over: w.over, timeline: w.timeline}
	w.most, w.mostRev, w.over, w.timeline = len(w.mid), w.at, nil, nil
	return p
}

// midNow returns the nodes mid-change now, with their changes.
func (w *midWatch) midNow() map[string]carvev1.ChangeRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]carvev1.ChangeRecord{}
	for node, c := range w.mid {
		out[node] = *c
	}
	return out
}

// covered reports whether node was seen mid-change at some time in
// [lo, hi]: whether a change the watch saw began by hi (allowing for the
// watch's delay, midSpan.begin) and had not ended before lo.
func (w *midWatch) covered(node string, lo, hi time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.spans[node] {
		if !s.begin().After(hi) && (s.to.IsZero() || !s.to.Before(lo)) {
			return true
		}
	}
	return false
}

// spansOf describes the times node was seen mid-change.
func (w *midWatch) spansOf(node string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.spans[node] {
		to := "now"
		if !s.to.IsZero() {
			to = w.since(s.to)
		}
		out = append(out, w.since(s.from)+" to "+to)
	}
	if len(out) == 0 {
		return "never"
	}
	return strings.Join(out, ", ")
}

// format writes a timeline, one line per event.
func (w *midWatch) format(tl []midEvent) string {
	var b strings.Builder
	for _, ev := range tl {
		what := "done"
		if ev.mid {
			what = "mid-change (" + ev.change + ")"
		}
		fmt.Fprintf(&b, "  %s %s %s -> %d mid-change (%s)\n", w.since(ev.at), ev.node, what, ev.count, ev.via)
	}
	return b.String()
}

// midProblems says what is wrong with what w saw in a phase: more than
// its bound mid-change at once, or fewer than least at most (least > 0:
// the rollout runs that many changes side by side, and the watch sees
// them), or a most that the Nodes listed at its revision do not show (the
// watch itself is wrong).
func midProblems(w *midWatch, seen midPhase, least int) []string {
	var out []string
	if seen.most > 0 && w.cs != nil {
		if n, desc, err := w.listedAt(seen.mostRev); err == nil && n != seen.most {
			out = append(out, fmt.Sprintf("the watch counted %d nodes mid-change at revision %d, but the Nodes listed at exactly that revision show %d: %s\ntimeline:\n%s",
				seen.most, seen.mostRev, n, desc, w.format(seen.timeline)))
		}
	}
	if len(seen.over) > 0 {
		var samples []string
		for _, s := range seen.over {
			samples = append(samples, s.text+"\n    "+w.confirm(s))
		}
		out = append(out, fmt.Sprintf("more than %d nodes mid-change at once (%d samples):\n  %s\ntimeline:\n%s",
			w.bound, len(seen.over), strings.Join(samples, "\n  "), w.format(seen.timeline)))
	}
	if seen.most < least {
		out = append(out, fmt.Sprintf("at most %d nodes seen mid-change at once; want %d to %d (the bound, used)\ntimeline:\n%s",
			seen.most, least, w.bound, w.format(seen.timeline)))
	}
	return out
}

// confirm counts a sample over the bound a second way (listedAt).
func (w *midWatch) confirm(s overSample) string {
	if w.cs == nil {
		return "(not confirmed: no client)"
	}
	n, desc, err := w.listedAt(s.rev)
	if err != nil {
		return fmt.Sprintf("(not confirmed: %v)", err)
	}
	return fmt.Sprintf("(the Nodes listed at exactly revision %d: %d mid-change: %s)", s.rev, n, desc)
}

// listedAt lists the fleet's Nodes as they were at revision rev exactly
// (the API server keeps a few minutes of history) and returns how many
// were mid-change then, and which.
func (w *midWatch) listedAt(rev uint64) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rv := strconv.FormatUint(rev, 10)
	list, err := w.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: w.selector, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		return 0, "", fmt.Errorf("list the Nodes at revision %s: %w", rv, err)
	}
	var mid []string
	for i := range list.Items {
		if c := changeOf(&list.Items[i], false); c != nil {
			mid = append(mid, fmt.Sprintf("%s (slot %s)", list.Items[i].Name, c.Slot))
		}
	}
	slices.Sort(mid)
	return len(mid), strings.Join(mid, ", "), nil
}

// TestMidWatchCounts checks the watch's bookkeeping without a cluster: a
// node's older version is ignored, a count over the bound is noted with
// the nodes counted, take starts again from the nodes mid-change, and
// covered finds an op inside a change, allowing for the watch's delay.
func TestMidWatchCounts(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &midWatch{bound: 2, start: t0, mid: map[string]*carvev1.ChangeRecord{}, spans: map[string][]midSpan{}}
	node := func(name string, rv int, change bool) *corev1.Node {
		rec := carvev1.NodeRecord{State: carvev1.StatePending}
		if change {
			rec.Change = &carvev1.ChangeRecord{Since: t0.Format(time.RFC3339Nano), Profile: "p", Slot: "s-" + name}
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv),
			Annotations: map[string]string{carvev1.AnnotationRecord: string(b)}}}
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.observe(node("a", 10, true), false, at(1))
	w.observe(node("b", 11, true), false, at(2))
	w.observe(node("a", 9, false), false, at(3)) // older than what the watch holds
	w.observe(node("c", 12, true), false, at(4))
	w.observe(node("a", 13, false), false, at(5))
	got := w.take()
	if got.most != 3 || len(got.over) != 1 || !strings.Contains(got.over[0].text, "a (since") || !strings.Contains(got.over[0].text, "c (since") || got.over[0].rev != 12 {
		t.Errorf("most %d, over %v; want 3, and one sample over 2 naming a, b and c", got.most, got.over)
	}
	if len(got.timeline) != 4 {
		t.Errorf("timeline of %d events, want 4:\n%s", len(got.timeline), w.format(got.timeline))
	}
	if next := w.take(); next.most != 2 || len(next.over) != 0 {
		t.Errorf("after take: most %d, over %v; want 2 (b and c) and none", next.most, next.over)
	}
	// A List at revision 20 in which c is done and d began: one state of
	// the API server, counted once (2), never c and d together (3).
	w.snapshot(&corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "20"},
		Items: []corev1.Node{*node("a", 13, false), *node("b", 11, true), *node("c", 19, false), *node("d", 18, true)}}, at(6))
	w.snapshot(&corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "19"},
		Items: []corev1.Node{*node("c", 12, true)}}, at(7)) // older than the view
	w.observe(node("c", 15, true), false, at(8)) // an event the List covered
	if got := w.take(); got.most != 2 || len(got.over) != 0 || len(w.midNow()) != 2 {
		t.Errorf("after a List: most %d, over %v, mid %v; want 2, none, b and d", got.most, got.over, w.midNow())
	}
	w.observe(node("c", 21, true), false, at(9))
	for _, c := range []struct {
		node   string
		lo, hi time.Time
		want   bool
	}{
		{"a", at(2), at(3), true},                              // inside a's change
		{"a", at(6), at(7), false},                             // after it
		{"a", at(0), at(0).Add(500 * time.Millisecond), true},  // its record's since, under a second before the watch saw it
		{"b", at(0), at(0).Add(500 * time.Millisecond), false}, // since, but 1.5 s before the watch saw it
		{"c", at(9), at(10), true},                             // still mid-change
		{"e", at(1), at(9), false},                             // never seen mid-change
	} {
		if got := w.covered(c.node, c.lo, c.hi); got != c.want {
			t.Errorf("covered(%s, %s, %s) = %v, want %v", c.node, w.since(c.lo), w.since(c.hi), got, c.want)
		}
	}
}
