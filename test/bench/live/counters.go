package live

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/carve-dev/carve/test/harness"
)

// dispatchedMetric counts the requests API Priority and Fairness let
// through, by FlowSchema: every request, watches included (a watch is
// counted once, when it is dispatched).
const dispatchedMetric = "apiserver_flowcontrol_dispatched_requests_total"

// requests counts an agent's API requests.
type requests struct {
	reads, writes float64
}

func (r requests) minus(o requests) requests {
	return requests{reads: r.reads - o.reads, writes: r.writes - o.writes}
}

func (r requests) plus(o requests) requests {
	return requests{reads: r.reads + o.reads, writes: r.writes + o.writes}
}

// countRequests reads the agent's request counts from the API server's
// /metrics (as the admin, whose requests the FlowSchemas do not match).
func countRequests(ctx context.Context, cs kubernetes.Interface) (requests, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return requests{}, fmt.Errorf("API server metrics: %w", err)
	}
	return parseRequests(raw)
}

// parseRequests sums dispatchedMetric over the samples of the two
// FlowSchemas (one per priority level, normally one).
func parseRequests(raw []byte) (requests, error) {
	var r requests
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, dispatchedMetric+"{")
		if !ok {
			continue
		}
		var dst *float64
		switch {
		case strings.Contains(labels, `flow_schema="`+writeSchema+`"`):
			dst = &r.writes
		case strings.Contains(labels, `flow_schema="`+readSchema+`"`):
			dst = &r.reads
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return r, fmt.Errorf("API server metrics: %q: %w", line, err)
		}
		*dst += v
	}
	if err := sc.Err(); err != nil {
		return r, fmt.Errorf("API server metrics: %w", err)
	}
	return r, nil
}

// schemaCheck is what the FlowSchemas counted of known requests.
type schemaCheck struct {
	// admin is what they counted of the admin's requests: want nothing.
	admin requests
	// probe is what they counted of the ServiceAccount's probeRequests.
	probe requests
}

// probeRequests are the ServiceAccount's known requests of checkSchemas:
// a read (get the profile ConfigMap) and two writes (create and delete a
// Lease).
var probeRequests = requests{reads: 1, writes: 2}

// checkSchemas waits until the FlowSchemas are in force (a request of the
// agent's ServiceAccount is counted), then checks that they count none of
// the admin's requests and exactly the ServiceAccount's known ones.
func checkSchemas(ctx context.Context, admin, agent kubernetes.Interface, node string) (schemaCheck, error) {
	var c schemaCheck
	if err := waitSchemas(ctx, admin, agent); err != nil {
		return c, err
	}
	c0, err := countRequests(ctx, admin)
	if err != nil {
		return c, err
	}
	if err := adminRequests(ctx, admin, node); err != nil {
		return c, err
	}
	c1, err := countRequests(ctx, admin)
	if err != nil {
		return c, err
	}
	if err := agentRequests(ctx, agent); err != nil {
		return c, err
	}
	c2, err := countRequests(ctx, admin)
	if err != nil {
		return c, err
	}
	c = schemaCheck{admin: c1.minus(c0), probe: c2.minus(c1)}
	if c.admin != (requests{}) || c.probe != probeRequests {
		return c, fmt.Errorf("the FlowSchemas counted %+v of the admin's requests (want none) and %+v of the ServiceAccount's (want %+v)",
			c.admin, c.probe, probeRequests)
	}
	return c, nil
}

// waitSchemas waits up to 30 s until a read of the profile ConfigMap as
// the agent's ServiceAccount is allowed and counted: the API server takes
// new RBAC bindings and FlowSchemas into account a moment after they are
// created.
func waitSchemas(ctx context.Context, admin, agent kubernetes.Interface) error {
	return harness.PollEvery(ctx, 100*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		before, err := countRequests(ctx, admin)
		if err != nil {
			return false, harness.Retry(err)
		}
		// Until RBAC has caught up with the new binding, the read is
		// forbidden (and counted all the same).
		_, getErr := agent.CoreV1().ConfigMaps(namespace).Get(ctx, configMapName, metav1.GetOptions{})
		after, err := countRequests(ctx, admin)
		if err != nil {
			return false, harness.Retry(err)
		}
		if getErr != nil {
			return false, harness.Retry(getErr)
		}
		return after.reads > before.reads, nil
	})
}

// adminRequests are requests of the admin like the harness's: read the
// node, set and remove a label on it.
func adminRequests(ctx context.Context, admin kubernetes.Interface, node string) error {
	if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("schema check: %w", err)
	}
	for _, v := range []string{"probe", ""} {
		if err := harness.SetNodeLabels(ctx, admin, node, map[string]string{"carve.dev/bench-live-probe": v}); err != nil {
			return fmt.Errorf("schema check: %w", err)
		}
	}
	return nil
}

// agentRequests makes probeRequests as the agent's ServiceAccount.
func agentRequests(ctx context.Context, agent kubernetes.Interface) error {
	if _, err := agent.CoreV1().ConfigMaps(namespace).Get(ctx, configMapName, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("schema check: get the ConfigMap as the agent: %w", err)
	}
	leases := agent.CoordinationV1().Leases(namespace)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: clusterName + "-probe"}}
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("schema check: create Lease as the agent: %w", err)
	}
	if err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("schema check: delete Lease as the agent: %w", err)
	}
	return nil
}
