package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/configs"
)

// Kinds of Lease, as their carve.dev/rollout label says.
const (
	// KindSlot is a rollout slot, held by a node through a disruptive
	// change.
	KindSlot = "slot"
	// KindMember says that a node's agent reads the file; the members are
	// the nodes a percentage is of. Agents no longer write member Leases:
	// they count the Nodes whose records name the file and give them to
	// Decide as member Leases that never expire.
	KindMember = "member"
	// KindFailure records that a node's disruptive change failed on a
	// revision of the file.
	KindFailure = "failure"
)

// Lease is what the accounting needs of one Lease.
type Lease struct {
	// Name is the Lease's name.
	Name string
	// Kind is KindSlot, KindMember or KindFailure.
	Kind string
	// Holder is the node that holds or wrote the Lease; "" is a released
	// slot.
	Holder string
	// Revision is the file's revision a slot was taken for or a failure
	// happened on.
	Revision string
	// Acquired and Renewed are when the holder took and last renewed it.
	Acquired, Renewed time.Time
	// Duration is how long after Renewed the Lease holds; 0 never expires
	// (failures, which only a new revision makes moot).
	Duration time.Duration
	// Stuck marks an expired slot whose holder's Node still records a
	// change in progress (its record's change): the holder is still
	// unavailable, so the slot still counts and is not taken over. The
	// caller sets it from the holder's Node.
	Stuck bool
}

// Expires is when the Lease expires without renewal (zero for one that
// never does).
func (l Lease) Expires() time.Time {
	if l.Duration <= 0 {
		return time.Time{}
	}
	return l.Renewed.Add(l.Duration)
}

// Live reports whether the Lease still holds at now: it has a holder and
// has not expired.
func (l Lease) Live(now time.Time) bool {
	return l.Holder != "" && (l.Duration <= 0 || now.Before(l.Renewed.Add(l.Duration)))
}

// Request is a node asking for a slot.
type Request struct {
	// Node asks.
	Node string
	// Policy is the rollout in force for the change.
	Policy configs.Rollout
	// Revision is the file's revision.
	Revision string
	// Now is the time of the decision.
	Now time.Time
}

// Decision is the answer to a Request.
type Decision struct {
	// Granted: the node may start or go on with its disruptive change,
	// holding Slot.
	Granted bool
	// Slot is the slot's Lease name: the one the node holds (Held) or the
	// one to take. "" when not granted.
	Slot string
	// Held: the node holds Slot already.
	Held bool
	// Halted: the failure budget of the revision is spent; no further node
	// starts a disruptive change.
	Halted bool
	// Nodes counts the nodes whose agents read the file (the Request's
	// node among them), from the member Leases given (a count needs none:
	// then 1); Bound is maxUnavailable for them.
	Nodes, Bound int
	// Holders are the nodes holding slots, sorted.
	Holders []string
	// Failed are the nodes failed on the revision, sorted.
	Failed []string
	// Stuck are the expired slots whose holders are still mid-change
	// (Lease.Stuck), by name; they count as held.
	Stuck []Lease
}

// Reason says why a Decision is not granted, for the node's Event and
// record; it names no holder, so that it changes only when the bound or
// the failures do (carvectl status shows the holders).
func (d Decision) Reason(p configs.Rollout) string {
	switch {
	case d.Granted:
		return ""
	case d.Halted:
		return fmt.Sprintf("the rollout is halted: %d of at most %d nodes failed on this revision of the profile file (%s); fix or revert the file to resume",
			len(d.Failed), p.MaxFailures, strings.Join(d.Failed, ", "))
	default:
		if p.MaxUnavailable.Percent {
			return fmt.Sprintf("all %d rollout slots are held (maxUnavailable %s of %d nodes)", d.Bound, p.MaxUnavailable, d.Nodes)
		}
		return fmt.Sprintf("all %d rollout slots are held (maxUnavailable %s)", d.Bound, p.MaxUnavailable)
	}
}

// Decide answers a node's request for a slot from the Leases of the file
// (any kinds, in any order; those of other names are ignored). A node that
// holds a slot keeps it, expired or not: an agent that restarts goes on
// with the change its slot was taken for. A slot that expired while its
// holder is mid-change (Stuck) still counts as held: that node is still
// unavailable. A node failed on the revision may try again; any other node
// is refused once the failed ones reach the budget. Otherwise the node
// gets a free slot below the bound, if fewer than the bound are held: the
// first free one from a place its name picks. slotName names slot i
// (SlotName with the file's ConfigMap name).
func Decide(leases []Lease, req Request, slotName func(i int) string) Decision {
	d := Decision{}
	members := map[string]bool{req.Node: true}
	failed := map[string]bool{}
	held := map[string]string{} // slot name -> holder
	for _, l := range leases {
		if l.Kind == KindSlot && l.Holder != "" && !l.Live(req.Now) && (l.Holder == req.Node || l.Stuck) {
			held[l.Name] = l.Holder
			if l.Holder != req.Node {
				d.Stuck = append(d.Stuck, l)
			}
			continue
		}
		if !l.Live(req.Now) {
			continue
		}
		switch l.Kind {
		case KindMember:
			members[l.Holder] = true
		case KindFailure:
			if l.Revision == req.Revision {
				failed[l.Holder] = true
			}
		case KindSlot:
			held[l.Name] = l.Holder
		}
	}
	d.Nodes = len(members)
	d.Bound = req.Policy.MaxUnavailable.Of(d.Nodes)
	d.Failed = slices.Sorted(maps.Keys(failed))
	for name, holder := range held {
		d.Holders = append(d.Holders, holder)
		if holder == req.Node {
			d.Granted, d.Held, d.Slot = true, true, name
		}
	}
	slices.Sort(d.Holders)
	slices.SortFunc(d.Stuck, func(a, b Lease) int { return strings.Compare(a.Name, b.Name) })
	d.Halted = len(failed) >= req.Policy.MaxFailures && !failed[req.Node]
	if d.Granted || d.Halted || len(held) >= d.Bound {
		return d
	}
	// Each node starts looking at its own place among the slots, so that
	// nodes asking at the same moment mostly want different ones.
	first := spread(req.Node, d.Bound)
	for k := range d.Bound {
		if name := slotName((first + k) % d.Bound); held[name] == "" {
			d.Granted, d.Slot = true, name
			return d
		}
	}
	return d
}

// spread places a node among n slots by a hash of its name.
func spread(node string, n int) int {
	sum := sha256.Sum256([]byte(node))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(n))
}

// maxName is the longest Lease name (a DNS subdomain).
const maxName = 253

// SlotName names slot i of the file in ConfigMap configMap:
// carve-rollout-<configMap>-<i>.
func SlotName(configMap string, i int) string {
	return name("carve-rollout-"+configMap, strconv.Itoa(i))
}

// MemberName names the member Lease of node for the file in configMap.
func MemberName(configMap, node string) string {
	return name("carve-member-"+configMap, node)
}

// FailureName names the failure Lease of node for the file in configMap.
func FailureName(configMap, node string) string {
	return name("carve-failure-"+configMap, node)
}

// name joins prefix and suffix with "-"; a name too long for a Lease keeps
// its start and ends in a hash of the whole.
func name(prefix, suffix string) string {
	return fit(prefix+"-"+suffix, maxName, 8)
}

// fit returns s when it has at most limit bytes, else its start and a hash
// of the whole (hashBytes bytes, in hex) within limit.
func fit(s string, limit, hashBytes int) string {
	if len(s) <= limit {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:hashBytes])
	return strings.TrimRight(s[:limit-len(h)-1], "-.") + "-" + h
}

// Revision names a revision of the profile file by its content: a new
// revision, a fix or a revert, resets the failure budget.
func Revision(data string) string {
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:6])
}

// maxLabelValue is the longest label value.
const maxLabelValue = 63

// LabelValue is the value of the carve.dev/config-map label for a
// ConfigMap name: the name, or for a name too long for a label value its
// start and a hash of the whole.
func LabelValue(configMap string) string {
	return fit(configMap, maxLabelValue, 6)
}
