package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

const (
	// redrawEvery is the least time between two frames on a terminal:
	// a burst of changes is drawn once.
	redrawEvery = 200 * time.Millisecond
	// rolloutEvery is how often status -w reads the rollout again (the
	// ROLLOUT column and the summary under the table).
	rolloutEvery = 5 * time.Second
	// syncPoll is how often status -w looks whether the first list is in.
	syncPoll = 20 * time.Millisecond
	// deletedState is the STATE of a node that went away, in its last line.
	deletedState = "<deleted>"
)

// watchOptions say how carvectl status -w writes; tests set them.
type watchOptions struct {
	// terminal redraws the table in place rather than printing a line per
	// change (only with -o table).
	terminal bool
	// now is the clock for the header and the rollout.
	now func() time.Time
	// redrawEvery and rolloutEvery are the constants of the same names.
	redrawEvery, rolloutEvery time.Duration
	// stderr gets the watch's transient errors outside a terminal.
	stderr io.Writer
}

// runStatusWatch is carvectl status -w: it watches until SIGINT or SIGTERM.
func runStatusWatch(stdout, stderr io.Writer, kubeconfig string, q statusQuery, newClient statusClientFunc) error {
	cs, host, err := newClient(kubeconfig, 0)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := watchOptions{terminal: q.output == "table" && isTerminal(stdout), now: time.Now,
		redrawEvery: redrawEvery, rolloutEvery: rolloutEvery, stderr: stderr}
	return watchStatus(ctx, cs, host, q, o, stdout)
}

// isTerminal says whether w is a character device, a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// nodeEvent is a Node as the informer now sees it: shown is false when it
// is gone, does not match the selector, or is not a GPU node.
type nodeEvent struct {
	name  string
	row   nodeStatus
	shown bool
}

// watchSources are what the informer and the rollout poller report.
type watchSources struct {
	events   <-chan nodeEvent
	errs     <-chan error
	rollouts <-chan rolloutStatus
	// synced says the first list has reached the handler.
	synced func() bool
	// resourceVersion is the informer's last synced resource version: it
	// moves on when a lost watch is back.
	resourceVersion func() string
}

// watchStatus lists and watches the GPU nodes matching q through cs and
// writes them to w as o says until ctx ends (then it returns nil), or until
// the API server refuses the watch. host names the API server in errors.
func watchStatus(ctx context.Context, cs kubernetes.Interface, host string, q statusQuery, o watchOptions, w io.Writer) error {
	if host == "" {
		host = "the API server"
	}
	sel, err := labels.Parse(q.selector)
	if err != nil {
		return fmt.Errorf("--selector %q: %w", q.selector, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// The informer logs nothing: its errors come to the loop below.
	ctx = klog.NewContext(ctx, klog.Logger{})
	events, errs, rollouts := make(chan nodeEvent), make(chan error, 1), make(chan rolloutStatus)
	inf := coreinformers.NewTypedFilteredNodeInformer(listThenWatch{cs}, 0, nil, func(lo *metav1.ListOptions) { lo.LabelSelector = q.selector })
	if err := inf.SetTransform(slimNode); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		select {
		case errs <- err:
		default: // the loop has one to read already
		}
	}); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	reg, err := inf.AddTypedEventHandler(nodeHandler(ctx, sel, events))
	if err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() { pollRollout(ctx, cs, q, o, rollouts) })
	s := &statusWatch{host: host, q: q, o: o, w: w, cs: cs, rows: map[string]nodeStatus{}}
	return s.loop(ctx, watchSources{events: events, errs: errs, rollouts: rollouts, synced: reg.HasSynced, resourceVersion: inf.LastSyncResourceVersion})
}

// listThenWatch has the informer list and then watch instead of asking
// for a watch-list stream: client-go retries a failed stream on its own,
// unseen, so an unreachable API server would show only as a timeout and a
// lost watch not at all, where a failed list reaches the watch error
// handler, and so the user, at once.
type listThenWatch struct{ kubernetes.Interface }

// IsWatchListSemanticsUnSupported tells client-go's reflector not to
// stream.
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// nodeHandler sends each Node the informer sees to events, as its row.
func nodeHandler(ctx context.Context, sel labels.Selector, events chan<- nodeEvent) coreinformers.NodeHandlerFuncs {
	send := func(e nodeEvent) {
		select {
		case events <- e:
		case <-ctx.Done():
		}
	}
	seen := func(n *corev1.Node) {
		e := nodeEvent{name: n.Name}
		// The API server filters by the selector; a fake one may not.
		if sel.Matches(labels.Set(n.Labels)) {
			e.row, e.shown = statusOf(n)
		}
		send(e)
	}
	return coreinformers.NodeHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, n *corev1.Node) { seen(n) },
		DeleteFunc: func(d cache.DeletedObject[*corev1.Node]) { send(nodeEvent{name: d.GetObjectName().Name}) },
	}
}

// slimNode keeps of a Node only what statusOf reads, so that the
// informer's cache holds little more than the rows.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels}}
	if a, ok := n.Annotations[carvev1.AnnotationRecord]; ok {
		slim.Annotations = map[string]string{carvev1.AnnotationRecord: a}
	}
	for name, q := range n.Status.Allocatable {
		if strings.HasPrefix(string(name), nvidiaResourcePrefix) {
			if slim.Status.Allocatable == nil {
				slim.Status.Allocatable = corev1.ResourceList{}
			}
			slim.Status.Allocatable[name] = q
		}
	}
	return slim, nil
}

// pollRollout reads the rollout every o.rolloutEvery and sends it.
func pollRollout(ctx context.Context, cs kubernetes.Interface, q statusQuery, o watchOptions, out chan<- rolloutStatus) {
	t := time.NewTicker(o.rolloutEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, statusTimeout)
		ro := rolloutOf(rctx, cs, q.namespace, q.configMap, o.now())
		cancel()
		select {
		case out <- ro:
		case <-ctx.Done():
			return
		}
	}
}

// statusWatch is one run of carvectl status -w: the rows it shows and how
// it shows them. Only its loop goroutine touches it.
type statusWatch struct {
	host string
	q    statusQuery
	o    watchOptions
	w    io.Writer
	cs   kubernetes.Interface
	// rows are the shown nodes' current rows, by name; ro the rollout.
	rows map[string]nodeStatus
	ro   rolloutStatus
	// synced: the first table is out; from then on changes are written.
	synced bool
	// widths are the columns' widths in the first table, for the lines
	// after it.
	widths []int
	// lastChange is when a row or the rollout last changed.
	lastChange time.Time
	// problem is the watch's error while it is lost, and problemRV the
	// resource version it was lost at.
	problem, problemRV string
	// dirty says a frame is due.
	dirty bool
}

// loop runs the watch until ctx ends or the API server refuses it.
func (s *statusWatch) loop(ctx context.Context, src watchSources) error {
	syncTick := time.NewTicker(syncPoll)
	defer syncTick.Stop()
	syncBy := time.NewTimer(statusTimeout)
	defer syncBy.Stop()
	var redraw <-chan time.Time
	lastDraw := time.Time{}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case e := <-src.events:
			s.recovered(true, src)
			err = s.apply(e)
		case ro := <-src.rollouts:
			s.recovered(false, src)
			err = s.setRollout(ro)
		case werr := <-src.errs:
			err = s.watchFailed(werr, src)
		case <-syncTick.C:
			if !s.synced && src.synced() {
				syncTick.Stop()
				err = s.start(ctx)
			}
		case <-syncBy.C:
			if !s.synced {
				return fmt.Errorf("list nodes from %s: no answer within %s", s.host, statusTimeout)
			}
		case <-redraw:
			redraw, lastDraw = nil, time.Now()
			err = s.draw()
		}
		if err != nil {
			return err
		}
		if s.dirty && redraw == nil {
			redraw = time.After(s.o.redrawEvery - time.Since(lastDraw))
		}
	}
}

// start writes the first table, with the rollout as it is now.
func (s *statusWatch) start(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	s.ro = rolloutOf(rctx, s.cs, s.q.namespace, s.q.configMap, s.o.now())
	cancel()
	for name, r := range s.rows {
		s.rows[name] = s.ro.mark(r)
	}
	s.synced, s.lastChange = true, s.o.now()
	switch {
	case s.q.output == "json":
		for _, r := range s.sorted() {
			if err := s.writeEvent("ADDED", r); err != nil {
				return err
			}
		}
		return nil
	case s.o.terminal:
		s.dirty = true
		return nil
	}
	rows := s.sorted()
	s.widths = columnWidths(rows)
	lines := []string{formatLine(strings.Split(statusHeader, "\t"), s.widths)}
	for _, r := range rows {
		lines = append(lines, formatLine(rowCells(r), s.widths))
	}
	return s.write(strings.Join(lines, "\n") + "\n")
}

// apply takes in one node event and writes the row if it changed.
func (s *statusWatch) apply(e nodeEvent) error {
	old, had := s.rows[e.name]
	switch {
	case e.shown:
		e.row = s.ro.mark(e.row)
		if had && reflect.DeepEqual(old, e.row) {
			return nil
		}
		s.rows[e.name] = e.row
		return s.changed(had, false, e.row)
	case had:
		delete(s.rows, e.name)
		return s.changed(true, true, old)
	}
	return nil
}

// setRollout takes in a newly read rollout and writes the rows whose part
// in it changed.
func (s *statusWatch) setRollout(ro rolloutStatus) error {
	if !sameRollout(s.ro, ro) && s.synced {
		s.lastChange = s.o.now()
	}
	s.ro = ro
	// On a terminal the durations under the table move on.
	s.dirty = s.synced && s.o.terminal
	for _, name := range slices.Sorted(maps.Keys(s.rows)) {
		r := ro.mark(s.rows[name])
		if !reflect.DeepEqual(r, s.rows[name]) {
			s.rows[name] = r
			if err := s.changed(true, false, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameRollout says a and b differ at most in when the slots were renewed
// and expire, which moves on each renewal.
func sameRollout(a, b rolloutStatus) bool {
	strip := func(r rolloutStatus) rolloutStatus {
		r.Slots = slices.Clone(r.Slots)
		for i := range r.Slots {
			r.Slots[i].Renewed, r.Slots[i].Expires = time.Time{}, time.Time{}
		}
		return r
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// changed writes row r, shown before (had) or not, now deleted or not.
func (s *statusWatch) changed(had, deleted bool, r nodeStatus) error {
	if !s.synced {
		return nil
	}
	s.lastChange = s.o.now()
	switch {
	case s.q.output == "json":
		kind := "MODIFIED"
		if deleted {
			kind = "DELETED"
		} else if !had {
			kind = "ADDED"
		}
		return s.writeEvent(kind, r)
	case s.o.terminal:
		s.dirty = true
		return nil
	}
	if deleted {
		r.State = deletedState
	}
	return s.write(formatLine(rowCells(r), s.widths) + "\n")
}

// statusEvent is one line of carvectl status -w -o json.
type statusEvent struct {
	// Type is ADDED (in the first listing too), MODIFIED or DELETED.
	Type string `json:"type"`
	nodeStatus
}

// writeEvent writes one JSON line.
func (s *statusWatch) writeEvent(kind string, r nodeStatus) error {
	b, err := json.Marshal(statusEvent{Type: kind, nodeStatus: r})
	if err != nil {
		return fmt.Errorf("encode %s: %w", r.Node, err)
	}
	return s.write(string(b) + "\n")
}

// write writes to the output.
func (s *statusWatch) write(text string) error {
	if _, err := io.WriteString(s.w, text); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// watchFailed handles an error of the informer: before the first table or
// when the API server refuses the request it ends the watch; else the
// informer tries again, and the error is shown until it is back.
func (s *statusWatch) watchFailed(err error, src watchSources) error {
	switch {
	case !s.synced || unrecoverable(err):
		return fmt.Errorf("watch nodes on %s: %w", s.host, err)
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil // the watch ran out; the informer lists again
	}
	s.problem = fmt.Sprintf("watch of nodes on %s lost at %s: %v; retrying", s.host, s.o.now().Format(time.TimeOnly), err)
	s.problemRV = src.resourceVersion()
	if s.o.terminal {
		s.dirty = true
		return nil
	}
	fmt.Fprintf(s.o.stderr, "carvectl status: %s\n", s.problem)
	return nil
}

// recovered clears the problem once the watch is back: a node event came
// (event), or the informer has listed again.
func (s *statusWatch) recovered(event bool, src watchSources) {
	if s.problem == "" || !event && src.resourceVersion() == s.problemRV {
		return
	}
	s.problem = ""
	if s.o.terminal {
		s.dirty = true
		return
	}
	fmt.Fprintf(s.o.stderr, "carvectl status: watching nodes on %s again\n", s.host)
}

// unrecoverable says that trying err's request again cannot help.
func unrecoverable(err error) bool {
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}

// sorted returns the rows by node name.
func (s *statusWatch) sorted() []nodeStatus {
	return slices.SortedFunc(maps.Values(s.rows), func(a, b nodeStatus) int { return cmp.Compare(a.Node, b.Node) })
}

// draw redraws the frame on a terminal: cursor home, each line cleared to
// its end, the rest of the screen cleared.
func (s *statusWatch) draw() error {
	s.dirty = false
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s (last change %s)\n", stateSummary(s.rows), s.lastChange.Format(time.TimeOnly))
	if s.problem != "" {
		fmt.Fprintln(&b, s.problem)
	}
	b.WriteByte('\n')
	rows := s.sorted()
	if err := writeNodeTable(&b, rows); err != nil {
		return err
	}
	if err := writeDynamic(&b, rows); err != nil {
		return err
	}
	s.ro.write(&b, s.o.now())
	return s.write("\x1b[H" + strings.ReplaceAll(b.String(), "\n", "\x1b[K\n") + "\x1b[J")
}

// stateSummary counts the rows by state, most first: "3 nodes: 2 success,
// 1 draining".
func stateSummary(rows map[string]nodeStatus) string {
	counts := map[string]int{}
	for _, r := range rows {
		counts[cmp.Or(r.State, "no state")]++
	}
	states := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(states))
	for i, st := range states {
		parts[i] = fmt.Sprintf("%d %s", counts[st], st)
	}
	noun := "nodes"
	if len(rows) == 1 {
		noun = "node"
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d %s", len(rows), noun)
	}
	return fmt.Sprintf("%d %s: %s", len(rows), noun, strings.Join(parts, ", "))
}

// columnWidths are the widths of the table's columns but the last, the
// header's and the rows' widest cell each.
func columnWidths(rows []nodeStatus) []int {
	header := strings.Split(statusHeader, "\t")
	widths := make([]int, len(header)-1)
	for _, cells := range append([][]string{header}, mapRows(rows)...) {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(cells[i]))
		}
	}
	return widths
}

// mapRows are the rows' cells.
func mapRows(rows []nodeStatus) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = rowCells(r)
	}
	return out
}

// formatLine pads cells to widths and two spaces, as the table does; a
// wider cell pushes the rest along.
func formatLine(cells []string, widths []int) string {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i < len(widths) && i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", max(widths[i]-utf8.RuneCountInString(c), 0)+2))
		}
	}
	return b.String()
}
