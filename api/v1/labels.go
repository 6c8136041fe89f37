package v1

import "strings"

// Values of LabelSource and of SelectedProfile.Source: why the profile in
// force is.
const (
	// SourceWindow: an active scheduled window whose node selector matches.
	SourceWindow = "window"
	// SourceLabel: the node's carve.dev/profile label (or the label the
	// agent pins profiles by).
	SourceLabel = "label"
	// SourceRule: the first rule whose node selector matches.
	SourceRule = "rule"
	// SourceDefault: the profile file's defaultProfile.
	SourceDefault = "default"
	// SourceAdopted: nothing in the profile file selects the node, so the
	// agent adopted the GPU layout it found (made by NVIDIA's MIG manager,
	// by hand or by an earlier profile): advertised as it is, never
	// changed. Goes with StateAdopted.
	SourceAdopted = "adopted"
)

// Node labels carve writes. The carve.dev/* keys are carve's own; the
// nvidia.com/* keys are the ones GPU feature discovery writes, with the
// same meaning, so that workloads and dashboards built on them keep
// working. carve removes a label only when its node record says carve
// wrote it (NodeRecord.Labels).
const (
	// LabelProfile is the label an operator sets to pin a node to a
	// profile; carve reads it and never writes it.
	LabelProfile = "carve.dev/profile"
	// LabelHold is the label an operator sets to hold a node: with the
	// value HoldTrue the agent observes only (no GPU change, no withdrawal;
	// windows and profile edits wait; devices stay advertised; state
	// StateHeld, the change it would make in the node record). Removing it
	// resumes. carve reads it and never writes it (MayWrite).
	LabelHold = "carve.dev/hold"
	// HoldTrue is the one value of LabelHold that holds the node; any
	// other value holds nothing and is reported (ReasonHoldIgnored).
	HoldTrue = "true"

	// LabelApplied is the profile realised on the node.
	LabelApplied = "carve.dev/profile.applied"
	// LabelSource is why the profile in force is: one of the Source
	// values (window, label, rule, default, adopted).
	LabelSource = "carve.dev/profile.source"
	// LabelWindow is the active scheduled window's name.
	LabelWindow = "carve.dev/window"
	// LabelState is the node's state, one of the State values.
	LabelState = "carve.dev/state"

	// LabelGPUCount is the number of GPUs.
	LabelGPUCount = "nvidia.com/gpu.count"
	// LabelGPUProduct is the product name of the first GPU, as a label
	// value, with "-SHARED" when whole GPUs are time-sliced under
	// nvidia.com/gpu (see ProductLabel).
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGPUMemory is the memory of the first GPU in MiB.
	LabelGPUMemory = "nvidia.com/gpu.memory"
	// LabelGPUReplicas is the most replicas of a whole GPU (1 unshared).
	LabelGPUReplicas = "nvidia.com/gpu.replicas"
	// LabelSharingStrategy is SharingNone or SharingTimeSlicing.
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	// LabelMIGCapable is "true" when a GPU of the node can run MIG.
	LabelMIGCapable = "nvidia.com/mig.capable"
	// LabelMIGStrategy is always MIGStrategyMixed: each MIG profile is its
	// own resource.
	LabelMIGStrategy = "nvidia.com/mig.strategy"

	// LabelMIGManagerState is the label NVIDIA's MIG manager writes its
	// state to; carve mirrors its own state there when asked
	// (carve-agent --mig-manager-state-label), see MIGManagerState.
	LabelMIGManagerState = "nvidia.com/mig.config.state"
	// LabelMIGManagerConfig is the label NVIDIA's MIG manager reads the
	// wanted configuration from; carve-agent --profile-label can make it
	// the label that pins a profile.
	LabelMIGManagerConfig = "nvidia.com/mig.config"

	// LabelOperandPrefix starts the labels with which NVIDIA's GPU Operator
	// deploys its operands on a node (nvidia.com/gpu.deploy.dcgm-exporter,
	// ...); see OperandLabel.
	LabelOperandPrefix = "nvidia.com/gpu.deploy."
	// OperandPaused is the value that pauses an operand for a MIG change,
	// as the GPU Operator's MIG manager writes it: the operand's DaemonSet
	// no longer selects the node, so its pod leaves and releases the GPUs.
	OperandPaused = "paused-for-mig-change"

	// LabelDriverUpgrade is the label with which the driver upgrade
	// controller of NVIDIA's GPU Operator tracks a node through an upgrade
	// of its containerized driver (the DriverUpgrade values). carve reads
	// it and never writes it: while it says the driver is being replaced
	// (DriverReplacing) the agent holds no GPU handle and advertises
	// nothing (StateDriverUpgrade).
	LabelDriverUpgrade = "nvidia.com/gpu-driver-upgrade-state"
)

// Values of LabelDriverUpgrade, in the order the upgrade controller moves a
// node through them; DriverUpgradeFailed may follow any of them.
const (
	DriverUpgradeRequired         = "upgrade-required"
	DriverCordonRequired          = "cordon-required"
	DriverWaitForJobsRequired     = "wait-for-jobs-required"
	DriverPodDeletionRequired     = "pod-deletion-required"
	DriverDrainRequired           = "drain-required"
	DriverNodeMaintenanceRequired = "node-maintenance-required"
	DriverPostMaintenanceRequired = "post-maintenance-required"
	DriverPodRestartRequired      = "pod-restart-required"
	DriverValidationRequired      = "validation-required"
	DriverUncordonRequired        = "uncordon-required"
	DriverUpgradeDone             = "upgrade-done"
	DriverUpgradeFailed           = "upgrade-failed"
)

// DriverReplacing reports whether node labels say the driver is being
// replaced: LabelDriverUpgrade is one of the values from the deletion of
// the GPU pods to the restart of the driver pod, in which the old driver
// is unloaded and the new one loaded. From validation-required on the new
// driver is loaded and validated (the validation needs the devices
// advertised again); before pod-deletion-required pods still run on the
// GPUs. upgrade-failed, an unknown value or none is not a replacement: the
// agent uses the driver if it can open it.
func DriverReplacing(labels map[string]string) bool {
	switch labels[LabelDriverUpgrade] {
	case DriverPodDeletionRequired, DriverDrainRequired, DriverNodeMaintenanceRequired, DriverPostMaintenanceRequired, DriverPodRestartRequired:
		return true
	}
	return false
}

// Held reports whether node labels hold the node (LabelHold is HoldTrue),
// and whether LabelHold is set to another value, which holds nothing.
func Held(labels map[string]string) (held, invalid bool) {
	v, ok := labels[LabelHold]
	return ok && v == HoldTrue, ok && v != HoldTrue
}

// OperandLabel returns the label that deploys a GPU Operator operand
// ("dcgm-exporter") on a node.
func OperandLabel(operand string) string { return LabelOperandPrefix + operand }

// Suffixes of the per-MIG-profile labels (MIGLabelKey), the ones GPU
// feature discovery writes for each MIG resource of the mixed strategy.
const (
	// MIGLabelCount counts the MIG devices of the profile.
	MIGLabelCount = ".count"
	// MIGLabelReplicas is the most replicas of one of its devices.
	MIGLabelReplicas = ".replicas"
	// MIGLabelMemory is the memory of one of its devices in MiB.
	MIGLabelMemory = ".memory"
	// MIGLabelProduct is the GPU's product, "MIG" and the profile, with
	// "-SHARED" when time-sliced and not renamed (ProductLabel).
	MIGLabelProduct = ".product"
	// MIGLabelSharingStrategy is SharingTimeSlicing when its devices are
	// time-sliced, else SharingNone.
	MIGLabelSharingStrategy = ".sharing-strategy"
	// MIGLabelSlicesGI is the compute slices of its GPU instance.
	MIGLabelSlicesGI = ".slices.gi"
	// MIGLabelSlicesCI is the compute slices of its compute instance
	// (equal to the GPU instance's: carve's fill them).
	MIGLabelSlicesCI = ".slices.ci"
	// MIGLabelMultiprocessors is its streaming multiprocessors.
	MIGLabelMultiprocessors = ".multiprocessors"
	// MIGLabelCopyEngines is its copy engines.
	MIGLabelCopyEngines = ".engines.copy"
	// MIGLabelDecoders is its video decoders (NVDEC).
	MIGLabelDecoders = ".engines.decoder"
	// MIGLabelEncoders is its video encoders (NVENC).
	MIGLabelEncoders = ".engines.encoder"
	// MIGLabelJPEGs is its JPEG decoders (NVJPG).
	MIGLabelJPEGs = ".engines.jpeg"
	// MIGLabelOFAs is its optical flow accelerators.
	MIGLabelOFAs = ".engines.ofa"
)

// SharedProductSuffix ends a product label whose resource is time-sliced
// under its own name, as GPU feature discovery writes it.
const SharedProductSuffix = "-SHARED"

// Values of LabelSharingStrategy and LabelMIGStrategy.
const (
	SharingNone        = "none"
	SharingTimeSlicing = "time-slicing"
	MIGStrategyMixed   = "mixed"
)

// CarvePrefix starts every key in carve's own domain.
const CarvePrefix = "carve.dev/"

// AnnotationRecord is the node annotation that holds the NodeRecord.
const AnnotationRecord = "carve.dev/partition"

// MIGLabelKey returns the key of a per-MIG-profile label:
// nvidia.com/mig-<profile>.count for MIGLabelCount, with "+" in the
// profile name written "." as in resource names (MIGName).
func MIGLabelKey(profile, suffix string) string {
	return vendorPrefix + MIGName(profile) + suffix
}

// ProductLabel returns the value of LabelGPUProduct (migProfile "") or of a
// MIG profile's MIGLabelProduct, as GPU feature discovery writes them: the
// GPU's product name, for a MIG profile followed by "MIG" and the profile
// as in resource names ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"), and
// SharedProductSuffix when shared says the resource is time-sliced
// (replicas above 1) and keeps its name (no renameShared).
func ProductLabel(product, migProfile string, shared bool) string {
	v := product
	if migProfile != "" {
		v += " MIG " + strings.TrimPrefix(MIGName(migProfile), "mig-")
	}
	if v = LabelValue(v); v != "" && shared {
		v = LabelValue(v + SharedProductSuffix)
	}
	return v
}

// LabelValue turns s into a valid label value the way GPU feature
// discovery does with product names: spaces become '-', characters a label
// value may not hold are dropped, the result is cut to 63 characters and
// trimmed so that it starts and ends with a letter or digit.
func LabelValue(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == ' ':
			b.WriteByte('-')
		case isAlnum(c), c == '-', c == '_', c == '.':
			b.WriteRune(c)
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.TrimFunc(v, func(c rune) bool { return !isAlnum(c) })
}

func isAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Labels and annotations of the rollout Leases in the profile ConfigMap's
// namespace (see package rollout).
const (
	// LeaseLabelKind is the kind of a rollout Lease: slot, member or
	// failure.
	LeaseLabelKind = "carve.dev/rollout"
	// LeaseLabelConfigMap is the name of the profile ConfigMap a rollout
	// Lease belongs to.
	LeaseLabelConfigMap = "carve.dev/config-map"
	// LeaseAnnotationRevision is the revision of the profile file a slot
	// was taken for, or a failure happened on.
	LeaseAnnotationRevision = "carve.dev/revision"
)

// ConfigMapKey is the key of the profile file in the profile ConfigMap.
const ConfigMapKey = "profiles.yaml"
