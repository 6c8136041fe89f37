package agent

import (
	"errors"
	"fmt"
	"strings"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/internal/textfmt"
)

// selectProfile accepts the profile file and selects the profile in force.
// The file is checked as a whole without this node's GPUs, since on a mixed
// fleet it holds profiles meant for other nodes; only the profile selected
// is checked on the GPUs (in plan). A rejected file ends the pass with the
// GPUs as they are, and so does a node no profile selects.
func (p *pass) selectProfile() (bool, error) {
	f, reject := p.in.Config, p.in.ConfigErr
	if reject == nil && f == nil {
		reject = errors.New("no profile file")
	}
	if reject == nil {
		var unverified []configs.Problem
		unverified, reject = desired.CheckFile(f, p.node)
		p.reportUnverified(unverified)
	}
	var sel configs.Selection
	if reject == nil {
		sel, reject = f.Select(p.in.Labels, p.in.Now)
	}
	if reject != nil {
		p.raise(carvev1.StateFailed)
		p.err = fmt.Errorf("profile file rejected: %w", reject)
		p.event(true, carvev1.ReasonConfigRejected, "profile file rejected, GPUs left as they are: %s", textfmt.OneLine(reject.Error()))
		p.log.Warn("profile file rejected; GPUs left as they are", "err", reject)
		return false, nil
	}
	p.file, p.sel = f, sel
	p.wakeAt(f.NextChange(p.in.Labels, p.in.Now))
	if sel.Source == configs.SourceNone {
		p.log.Info("no profile selects this node; GPUs left as they are")
		return false, nil
	}
	return true, nil
}

// reportUnverified reports the entries of the file that could not be
// checked on this node (for GPU models it does not know) in a Warning
// Event and the log; they do not reject the file.
func (p *pass) reportUnverified(places []configs.Problem) {
	if len(places) == 0 {
		return
	}
	lines := configs.Lines(places) // the first ones, and a count of the rest
	p.event(true, carvev1.ReasonConfigUnverified, "profile file entries not checked on this node, for GPU models it does not know (checked on nodes that have them): %s",
		strings.Join(lines, "; "))
	p.log.Info("profile file entries for GPU models unknown here; not checked here", "entries", lines)
}
