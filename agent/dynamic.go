package agent

import (
	"fmt"

	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/textfmt"
)

// desiredState resolves the selected profile on the node's GPUs. A profile
// that cannot be realised here (it does not fit the GPUs, or it has dynamic
// GPUs and the agent does not advertise through DRA) is reported
// unrealisable and ends the pass with the GPUs as they are.
func (p *pass) desiredState() (desired.State, bool) {
	want, err := desired.For(p.file, p.sel.Profile, p.node)
	if err == nil {
		err = p.r.dynamicNeedsDRA(want)
	}
	if err != nil {
		p.unrealisable(err)
		return desired.State{}, false
	}
	return want, true
}

// dynamicNeedsDRA refuses a state with dynamic GPUs unless the agent
// advertises through DRA: their MIG devices are offered to claims and
// made for them, which only carve's DRA driver does.
func (r *Reconciler) dynamicNeedsDRA(want desired.State) error {
	gpus := want.DynamicGPUs()
	if len(gpus) == 0 || r.Advertise == AdvertiseDRA {
		return nil
	}
	mode := r.Advertise
	if mode == "" {
		mode = AdvertiseDevicePlugin
	}
	verb := "is"
	if len(gpus) > 1 {
		verb = "are"
	}
	return fmt.Errorf("%s %s dynamic (MIG devices made on demand for DRA claims), which needs carve-agent --advertise %s; this agent runs --advertise %s",
		textfmt.GPUs(gpus), verb, AdvertiseDRA, mode)
}
