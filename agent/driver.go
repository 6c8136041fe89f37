package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/textfmt"
	"github.com/carve-dev/carve/partition"
)

// DriverGate lets go of the GPU driver while it is replaced and takes it
// back afterwards: partition.Gate, through which every part of the agent
// reaches NVML.
type DriverGate interface {
	// Release closes every NVML handle and event set.
	Release() error
	// Reacquire opens NVML again; it fails while the driver is not loaded.
	Reacquire() error
	// Released reports whether the handles are closed.
	Released() bool
}

var _ DriverGate = (*partition.Gate)(nil)

// driverRetryFirst and driverRetryLongest bound the wait between two tries to
// open the driver again once its upgrade is over by its label.
const (
	driverRetryFirst   = time.Second
	driverRetryLongest = 30 * time.Second
)

// driverAway ends the pass before anything reads the GPUs when the driver
// is away: being replaced (carvev1.DriverReplacing), or not yet loaded
// again. done says the Result is the pass's; otherwise the driver is
// there (opened again if it was released) and the pass goes on.
func (r *Reconciler) driverAway(ctx context.Context, in Input) (res Result, done bool) {
	if r.Driver == nil {
		return Result{}, false
	}
	if carvev1.DriverReplacing(in.Labels) {
		return r.stepAside(ctx, in), true
	}
	if !r.Driver.Released() {
		return Result{}, false
	}
	if err := r.Driver.Reacquire(); err != nil {
		return r.driverMissing(ctx, in, err), true
	}
	r.driverRetry = 0
	value := in.Labels[carvev1.LabelDriverUpgrade]
	if value == "" {
		value = "removed"
	}
	r.driverBack = &Event{Reason: carvev1.ReasonDriverBack, Message: fmt.Sprintf(
		"the GPU driver is loaded again (%s %s): carve realises the profile in force again, as after a reboot", carvev1.LabelDriverUpgrade, value)}
	r.logger().Info("GPU driver loaded again; NVML reopened", "upgradeState", value)
	return Result{}, false
}

// stepAside is the pass of a node whose driver is being replaced: nothing
// advertised, every NVML handle closed, no GPU change, state
// driver-upgrade.
func (r *Reconciler) stepAside(ctx context.Context, in Input) Result {
	value := in.Labels[carvev1.LabelDriverUpgrade]
	var errs []error
	if err := r.withdrawAll(ctx); err != nil {
		errs = append(errs, fmt.Errorf("withdraw the devices: %w", err))
	}
	if !r.Driver.Released() {
		if err := r.Driver.Release(); err != nil {
			errs = append(errs, fmt.Errorf("let go of the driver: %w", err))
		}
		r.logger().Info("GPU driver being replaced; NVML closed, nothing advertised", "upgradeState", value)
	}
	r.driverRetry = 0
	ev := Event{Reason: carvev1.ReasonDriverUpgrade, Message: fmt.Sprintf(
		"the GPU driver is being replaced (%s=%s): carve closed its GPU handles and advertises nothing until the driver is back", carvev1.LabelDriverUpgrade, value)}
	why := fmt.Sprintf("the driver upgrade to end (%s=%s)", carvev1.LabelDriverUpgrade, value)
	return r.awayResult(in, why, errors.Join(errs...), ev, time.Time{})
}

// driverMissing is the pass of a node whose driver upgrade is over by its
// label (or that started without a driver) while NVML cannot be opened:
// nothing advertised, a retry with backoff.
func (r *Reconciler) driverMissing(ctx context.Context, in Input, cause error) Result {
	err := fmt.Errorf("the GPU driver cannot be opened: %w", cause)
	if werr := r.withdrawAll(ctx); werr != nil {
		err = errors.Join(err, fmt.Errorf("withdraw the devices: %w", werr))
	}
	r.driverRetry = min(max(2*r.driverRetry, driverRetryFirst), driverRetryLongest)
	r.logger().Warn("GPU driver not loaded; retrying", "err", cause, "retryIn", r.driverRetry)
	ev := Event{Warning: true, Reason: carvev1.ReasonDriverNotLoaded, Message: "the GPU driver cannot be opened; carve advertises nothing and retries: " +
		textfmt.OneLine(cause.Error())}
	return r.awayResult(in, "the GPU driver to load", err, ev, in.Now.Add(r.driverRetry))
}

// withdrawAll stops advertising every device.
func (r *Reconciler) withdrawAll(ctx context.Context) error {
	if ga, ok := r.Devices.(GPUAdvertiser); ok {
		return ga.Advertise(ctx, nil, nil)
	}
	return r.Devices.Update(ctx, nil)
}

// awayResult is the Result of a pass with the driver away: state
// driver-upgrade, the labels carve wrote before kept (but the state's),
// the node record's GPUs marked not advertised.
func (r *Reconciler) awayResult(in Input, why string, err error, ev Event, requeue time.Time) Result {
	labels := map[string]string{}
	var rec carvev1.NodeRecord
	if prev := in.Previous; prev != nil {
		rec = *prev
		for _, k := range prev.Labels {
			if v, ok := in.Labels[k]; ok {
				labels[k] = v
			}
		}
		rec.GPUs = slices.Clone(prev.GPUs)
		for i := range rec.GPUs {
			if rec.GPUs[i].NotAdvertised == "" {
				rec.GPUs[i].NotAdvertised = carvev1.NotAdvertisedDriverUpgrade
			}
		}
	}
	labels[carvev1.LabelState] = carvev1.StateDriverUpgrade
	if r.Labels.MIGManagerState {
		labels[carvev1.LabelMIGManagerState] = carvev1.MIGManagerState(carvev1.StateDriverUpgrade)
	}
	rec.State, rec.Waiting, rec.LastError, rec.AgentVersion = carvev1.StateDriverUpgrade, why, "", r.AgentVersion
	if err != nil {
		rec.LastError = textfmt.OneLine(err.Error())
	}
	rec.Labels = slices.Sorted(maps.Keys(labels))
	return Result{
		State: carvev1.StateDriverUpgrade, Selection: noSelection(), Labels: labels,
		Annotation: carvev1.Next(in.Previous, rec, in.Now), Events: r.dedupe([]Event{ev}),
		Requeue: requeue, Err: err,
	}
}
