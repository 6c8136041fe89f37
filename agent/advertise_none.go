package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/carve-dev/carve/plugin"
	"github.com/carve-dev/carve/timeslice"
)

// Values of Config.Advertise (carve-agent's --advertise): how the devices
// carve makes reach the kubelet.
const (
	// AdvertiseDevicePlugin serves the devices through carve's own
	// kubelet device-plugin servers (the default; "" means it too).
	AdvertiseDevicePlugin = "device-plugin"
	// AdvertiseNone serves no device at all: carve realises and records
	// the partitions (labels, node record, Events) and leaves advertising
	// to another device plugin, such as NVIDIA's; or to nobody, in scale
	// tests that run many agents on one machine.
	AdvertiseNone = "none"
	// AdvertiseDRA publishes the devices through Dynamic Resource
	// Allocation: carve's DRA driver (gpu.carve.dev) publishes the node's
	// ResourceSlice and prepares claims; no device-plugin server runs.
	AdvertiseDRA = "dra"
	// advertiseBoth is refused: a device cannot be offered through both
	// paths at once.
	advertiseBoth = "both"
)

// PodResourcesNone as Config.PodResourcesSocket (carve-agent's
// --pod-resources-socket none) declares a node without a kubelet: no pod
// can hold a device, and the agent asks nobody (NothingInUse). For tests,
// such as scale tests with many agents and no kubelets.
const PodResourcesNone = "none"

// CheckAdvertise checks a value for Config.Advertise: "",
// AdvertiseDevicePlugin, AdvertiseDRA or AdvertiseNone. The error starts
// with the value (cmd/carve-agent puts the flag's name before it).
func CheckAdvertise(mode string) error {
	switch mode {
	case "", AdvertiseDevicePlugin, AdvertiseDRA, AdvertiseNone:
		return nil
	case advertiseBoth:
		return errBothPaths(mode)
	}
	return fmt.Errorf("%q: want %s, %s or %s", mode, AdvertiseDevicePlugin, AdvertiseDRA, AdvertiseNone)
}

// errCDIWithoutAdvertising is New's answer to CDI with AdvertiseNone.
var errCDIWithoutAdvertising = errors.New("CDI names are part of carve's Allocate answers, and with Advertise none carve answers no Allocate: configure CDI in the device plugin that advertises")

// NoAdvertiser is the Advertiser of Config.Advertise none: it serves
// nothing. Update and Withdraw do nothing and never fail, so a reconcile
// goes on to label and record the node as it would with carve's device
// plugin. A Withdraw before a destroy therefore does not keep the kubelet
// from giving the device to a pod: the device plugin that advertises (and
// the in-use check just before the destroy) must see to that.
type NoAdvertiser struct{}

// Update does nothing: no device is advertised.
func (NoAdvertiser) Update(context.Context, timeslice.Resources) error { return nil }

// Withdraw does nothing: nothing was advertised.
func (NoAdvertiser) Withdraw(context.Context, []string) error { return nil }

// NothingInUse is the InUseSource of a node without a kubelet
// (Config.PodResourcesSocket PodResourcesNone): it answers that no pod
// holds any device, without dialing anything. For tests only: on a real
// node it would let the agent destroy devices pods hold.
type NothingInUse struct{}

// InUse returns an empty answer: no assignment, no device held.
func (NothingInUse) InUse(context.Context) (*plugin.InUse, error) {
	return &plugin.InUse{Assignments: []plugin.Assignment{}, UUIDs: []string{}}, nil
}

var (
	_ Advertiser  = NoAdvertiser{}
	_ InUseSource = NothingInUse{}
)
