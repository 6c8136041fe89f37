package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carve-dev/carve/partition"
)

// claimsPage bounds one List of ResourceClaims.
const claimsPage = 500

// Holder is a ResourceClaim that holds devices of this node.
type Holder struct {
	Namespace, Claim string
	// Pods are the pods the claim is reserved for (those that use it).
	Pods []string
	// Devices are the device names, UUIDs the physical devices.
	Devices, UUIDs []string
}

// Holders returns the claims that hold this node's devices: those the API
// server says are allocated devices of the node's pool, read afresh (not
// from a cache, since a claim allocated a moment ago must count), and the
// claims prepared here that the API server no longer lists.
func (d *Driver) Holders(ctx context.Context) ([]Holder, error) {
	claims, err := d.listClaims(ctx)
	if err != nil {
		return nil, err
	}
	known, err := d.known()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Holder
	seen := map[string]bool{}
	for _, c := range claims {
		seen[string(c.UID)] = true
		if h, ok := d.holderFromAPI(c, known); ok {
			out = append(out, h)
		}
	}
	for uid, pc := range d.claims.rec.Claims {
		if seen[uid] {
			continue
		}
		h := Holder{Namespace: pc.Namespace, Claim: pc.Name}
		for _, dev := range pc.Devices {
			h.Devices, h.UUIDs = append(h.Devices, dev.Device), append(h.UUIDs, dev.UUID)
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Holder) int {
		if a.Namespace != b.Namespace {
			return strings.Compare(a.Namespace, b.Namespace)
		}
		return strings.Compare(a.Claim, b.Claim)
	})
	return out, nil
}

// holderFromAPI returns what a claim holds of this node's devices.
func (d *Driver) holderFromAPI(c resourceapi.ResourceClaim, known map[string]string) (Holder, bool) {
	if c.Status.Allocation == nil {
		return Holder{}, false
	}
	h := Holder{Namespace: c.Namespace, Claim: c.Name}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != d.cfg.NodeName {
			continue
		}
		uuid, ok := known[r.Device]
		if !ok {
			continue // not a device of the GPUs as they are
		}
		h.Devices, h.UUIDs = append(h.Devices, r.Device), append(h.UUIDs, uuid)
	}
	if len(h.Devices) == 0 {
		return Holder{}, false
	}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "pods" && ref.APIGroup == "" {
			h.Pods = append(h.Pods, ref.Name)
		}
	}
	return h, true
}

// known maps the name of every device the GPUs hold now, and every one
// last advertised, to its UUID; a device of a dynamic GPU to its GPU's
// UUID, so that a claim allocated one holds the GPU, until its MIG device
// is made, then to the MIG device's. The GPUs are read
// afresh: a restarted agent checks claims before it first advertises.
func (d *Driver) known() (map[string]string, error) {
	d.mu.Lock()
	out := maps.Clone(d.offer.UUIDs)
	if out == nil {
		out = map[string]string{}
	}
	for name, dd := range d.offer.Dynamic {
		out[name] = dd.GPUUUID
	}
	// A device made for a claim is its MIG device, whether or not its GPU
	// is dynamic now (a GPU turning static keeps it until its claim ends).
	for name, rec := range d.claims.rec.Instances {
		if rec.UUID != "" {
			out[name] = rec.UUID
		}
	}
	d.mu.Unlock()
	if d.cfg.GPUs == nil {
		return out, nil
	}
	gpus, err := partition.ReadInventory(d.cfg.GPUs)
	if err != nil {
		return nil, fmt.Errorf("dra: read the GPUs: %w", err)
	}
	devs, err := Devices(gpus)
	if err != nil {
		return nil, fmt.Errorf("dra: %w", err)
	}
	for _, dev := range devs {
		out[dev.Name] = *dev.Attributes[AttrUUID].StringValue
	}
	return out, nil
}

// listClaims lists every ResourceClaim, a page at a time.
func (d *Driver) listClaims(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
	var out []resourceapi.ResourceClaim
	opts := metav1.ListOptions{Limit: claimsPage}
	for {
		l, err := d.cfg.Client.ResourceClaims("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("dra: list ResourceClaims: %w", err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}
