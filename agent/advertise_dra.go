package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// GPUAdvertiser is an Advertiser that describes devices from the GPUs
// themselves (placements, products), not only from the resources: the DRA
// driver. The reconciler calls Advertise instead of Update on one.
type GPUAdvertiser interface {
	Advertiser
	Advertise(ctx context.Context, gpus []partition.GPU, res timeslice.Resources) error
}

// claimsInUse adds to what the kubelet's PodResources API says the devices
// that ResourceClaims hold: a claim allocated a device of the node counts
// as in use exactly as a device-plugin allocation does, and the pods it is
// reserved for are the ones the drain policy evicts.
type claimsInUse struct {
	pods   InUseSource
	driver *dra.Driver
}

// InUse returns both sources' answers together.
func (c claimsInUse) InUse(ctx context.Context) (*plugin.InUse, error) {
	out, err := c.pods.InUse(ctx)
	if err != nil {
		return nil, err
	}
	holders, err := c.driver.Holders(ctx)
	if err != nil {
		return nil, fmt.Errorf("claims holding devices: %w", err)
	}
	merged := &plugin.InUse{Assignments: slices.Clone(out.Assignments), UUIDs: slices.Clone(out.UUIDs)}
	for _, h := range holders {
		merged.Assignments = append(merged.Assignments, claimAssignments(h)...)
		merged.UUIDs = append(merged.UUIDs, h.UUIDs...)
	}
	slices.Sort(merged.UUIDs)
	merged.UUIDs = slices.Compact(merged.UUIDs)
	return merged, nil
}

// claimAssignments is one Assignment per pod the claim is reserved for, or
// one without a pod when none is (a claim allocated but not yet, or no
// longer, used still holds its devices). The resource names the claim.
func claimAssignments(h dra.Holder) []plugin.Assignment {
	a := plugin.Assignment{Namespace: h.Namespace, Resource: "resourceclaim/" + h.Claim, DeviceIDs: h.Devices, UUIDs: h.UUIDs}
	if len(h.Pods) == 0 {
		return []plugin.Assignment{a}
	}
	out := make([]plugin.Assignment, 0, len(h.Pods))
	for _, pod := range h.Pods {
		a.Pod = pod
		out = append(out, a)
	}
	return out
}

// errBothPaths is CheckAdvertise's answer to "both".
func errBothPaths(mode string) error {
	return fmt.Errorf("%s: one node cannot advertise its GPUs through the device plugin and DRA at once: the kubelet would hand a device to a pod through one path while a claim holds it through the other; choose %s", mode,
		strings.Join([]string{AdvertiseDevicePlugin, AdvertiseDRA, AdvertiseNone}, ", "))
}

var (
	_ GPUAdvertiser = (*dra.Driver)(nil)
	_ InUseSource   = claimsInUse{}
)

// errCDIWithDRA is New's answer to CDI with AdvertiseDRA.
var errCDIWithDRA = errors.New("CDI is how the DRA driver always answers (a CDI spec per claim); the CDI setting is for the device plugin's Allocate answers: drop it with Advertise dra")
