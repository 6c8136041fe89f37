package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/carve-dev/carve/rollout"
)

// releaseTimeout bounds carvectl rollout release as a whole.
const releaseTimeout = 30 * time.Second

// rolloutUsage is the usage of carvectl rollout.
const rolloutUsage = `Usage:
  carvectl rollout release NODE [--config-map NS/NAME] [--dry-run] [--force] [--kubeconfig PATH]
      deletes the rollout slot NODE holds, so that another node may take it

Run 'carvectl rollout release -h' for its flags.
`

// releaseQuery is what carvectl rollout release frees: the slots node
// holds in the rollout of the ConfigMap namespace/configMap, read at now.
type releaseQuery struct {
	node, namespace, configMap string
	dryRun, force              bool
	now                        time.Time
}

// runRollout runs carvectl rollout COMMAND.
func runRollout(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, rolloutUsage)
		return exitError{2}
	}
	switch args[0] {
	case "release":
		return runRelease(args[1:], stdout, stderr, newClient)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, rolloutUsage)
		return nil
	}
	fmt.Fprintf(stderr, "carvectl rollout: unknown command %q\n\n%s", args[0], rolloutUsage)
	return exitError{2}
}

func runRelease(args []string, stdout, stderr io.Writer, newClient statusClientFunc) error {
	fs := flag.NewFlagSet("rollout release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: carvectl rollout release NODE [flags]\n\nDeletes the rollout slot (Lease) NODE holds, so that a waiting node may take it.\n\n")
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	configMap := fs.String("config-map", "carve-system/carve-profiles", "namespace/name of the profile ConfigMap whose rollout slot to release")
	q := releaseQuery{}
	fs.BoolVar(&q.dryRun, "dry-run", false, "print what would be released, change nothing")
	fs.BoolVar(&q.force, "force", false, "release a slot its agent still renews: that agent stops at its next operation boundary and waits for a slot again")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("want one NODE, got %d arguments %q", len(rest), rest)
	}
	ns, name, err := splitConfigMap(*configMap)
	if err != nil {
		return err
	}
	q.node, q.namespace, q.configMap, q.now = rest[0], ns, name, time.Now()
	cs, host, err := newClient(*kubeconfig, releaseTimeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := release(ctx, cs, q, stdout, stderr); err != nil {
		if host == "" {
			host = "the API server"
		}
		return fmt.Errorf("%s: %w", host, err)
	}
	return nil
}

// parseInterleaved parses fs's flags wherever they stand among args, as
// in "release NODE --dry-run", and returns the other arguments in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, exitError{2}
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// release deletes the slots q.node holds, each on the resourceVersion it
// read, or with q.dryRun only says what it would do. It refuses a slot
// whose holder still renews it unless q.force, and ends with exit 1 when
// the node holds none, when it refuses, and when a slot changed between
// the read and the delete (then that slot is left as it is).
func release(ctx context.Context, cs kubernetes.Interface, q releaseQuery, stdout, stderr io.Writer) error {
	held, err := heldSlots(ctx, cs, q)
	if err != nil {
		return err
	}
	if len(held) == 0 {
		fmt.Fprintf(stderr, "carvectl rollout release: node %s holds no rollout slot of %s/%s: nothing to release\n", q.node, q.namespace, q.configMap)
		return exitError{1}
	}
	var refused []string
	for _, h := range held {
		if !h.slot.Expired && !q.force {
			refused = append(refused, fmt.Sprintf("slot %s: node %s's agent still renews it (last renewal %s, expires in %s): the agent is alive",
				h.slot.Name, q.node, ago(h.slot.Renewed, q.now), h.slot.Expires.Sub(q.now).Round(time.Second)))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintf(stderr, "carvectl rollout release: %s; nothing released.\n"+
			"--force releases it anyway: that agent then stops at its next operation boundary, keeps its checkpoint and waits for a slot again.\n",
			strings.Join(refused, "; "))
		return exitError{1}
	}
	var failed bool
	for _, h := range held {
		if err := releaseOne(ctx, cs, q, h, stdout, stderr); err != nil {
			if _, ok := errors.AsType[exitError](err); !ok {
				return err
			}
			failed = true
		}
	}
	if failed {
		return exitError{1}
	}
	return nil
}

// heldSlot is a slot Lease as read, and what its holder's Node says.
type heldSlot struct {
	lease coordinationv1.Lease
	slot  slotStatus
}

// heldSlots lists the slot Leases of the query's ConfigMap that q.node
// holds, live or expired, by name, each with its holder's Node read.
func heldSlots(ctx context.Context, cs kubernetes.Interface, q releaseQuery) ([]heldSlot, error) {
	sel := carvev1.LeaseLabelConfigMap + "=" + rollout.LabelValue(q.configMap) + "," + carvev1.LeaseLabelKind + "=" + rollout.KindSlot
	list, err := cs.CoordinationV1().Leases(q.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list rollout slots in %s: %w", q.namespace, err)
	}
	var out []heldSlot
	for _, l := range list.Items {
		s, ok := slotOfLease(&l, q.now)
		if !ok || s.Node != q.node {
			continue
		}
		s.readHolder(ctx, cs)
		out = append(out, heldSlot{lease: l, slot: s})
	}
	slices.SortFunc(out, func(a, b heldSlot) int { return strings.Compare(a.slot.Name, b.slot.Name) })
	return out, nil
}

// releaseOne deletes one slot on the resourceVersion read (not with
// q.dryRun) and prints what it did and what happens next. A slot that
// changed since it was read is left, with exit 1.
func releaseOne(ctx context.Context, cs kubernetes.Interface, q releaseQuery, h heldSlot, stdout, stderr io.Writer) error {
	verb := "released"
	if q.dryRun {
		verb = "would release"
	} else {
		rv := h.lease.ResourceVersion
		err := cs.CoordinationV1().Leases(q.namespace).Delete(ctx, h.lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case apierrors.IsConflict(err):
			fmt.Fprintf(stderr, "carvectl rollout release: slot %s changed since it was read (renewed, released or taken over): nothing done; run the command again to see it as it is now\n", h.lease.Name)
			return exitError{1}
		case apierrors.IsNotFound(err):
			fmt.Fprintf(stdout, "slot %s/%s is gone already (released meanwhile): nothing done\n", q.namespace, h.lease.Name)
			return nil
		case err != nil:
			return fmt.Errorf("delete slot %s/%s: %w", q.namespace, h.lease.Name, err)
		}
	}
	writeReleased(stdout, verb, q, h.slot)
	return nil
}

// writeReleased says which slot was (or would be) released, what its
// holder's Node said, and what happens next.
func writeReleased(w io.Writer, verb string, q releaseQuery, s slotStatus) {
	fmt.Fprintf(w, "%s slot %s/%s, held by %s since %s\n", verb, q.namespace, s.Name, s.Node, s.Since.Format(time.RFC3339))
	state := "renewed by its agent"
	if s.Expired {
		state = "expired " + ago(s.Expires, q.now)
	}
	fmt.Fprintf(w, "  last renewal: %s (%s)\n", ago(s.Renewed, q.now), state)
	switch {
	case s.HolderGone:
		fmt.Fprintf(w, "  holder: node %s is gone\n", s.Node)
	case s.HolderError != "":
		fmt.Fprintf(w, "  holder: state %s; %s\n", orDash(s.HolderState), s.HolderError)
	case s.Stuck:
		fmt.Fprintf(w, "  holder: state %s, mid-change since %s\n", orDash(s.HolderState), sinceText(s.MidChangeSince, q.now))
	default:
		fmt.Fprintf(w, "  holder: state %s, no change in progress\n", orDash(s.HolderState))
	}
	fmt.Fprintf(w, "  next: %s\n", releaseNext(s))
}

// releaseNext says what follows the release of s.
func releaseNext(s slotStatus) string {
	free := "the slot is free: a waiting node takes it at its next try (within about 8 s)"
	switch {
	case !s.Expired:
		return free + "; the agent on " + s.Node + " finds its slot gone when it renews it, stops at its next operation boundary " +
			"(pending, Event RolloutFenced), keeps its checkpoint, and goes on once it holds a slot again. " +
			"Until then the rollout does not count it as unavailable, even if its change is half done"
	case s.Stuck:
		return free + "; the rollout no longer counts " + s.Node + " as unavailable, though its record still says a change is in progress. " +
			"If its agent comes back, it waits for a slot before its next disruptive step"
	}
	return free
}

// ago is t in RFC 3339 with how long before now it was.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s, %s ago", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}
