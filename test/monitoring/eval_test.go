package monitoring

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/template"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// evalInterval is how often the rules are evaluated, and the step between
// the values of a series description (promtool test rules' default).
const evalInterval = time.Minute

// floatSample is one value of a series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }

// loadSeries makes a Queryable of series descriptions, one a line, as
// promtool test rules' input_series take them: metric{labels} values, the
// values evalInterval apart from time 0 (1x30, 0+5x10, _ for none).
func loadSeries(t *testing.T, input string) storage.Queryable {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var all []storage.Series
	for line := range strings.Lines(input) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		lbls, vals, err := p.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range vals {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * evalInterval.Milliseconds(), f: v.Value})
			}
		}
		all = append(all, storage.NewListSeries(lbls, samples))
	}
	sel := func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		out := &seriesSet{i: -1}
		for _, s := range all {
			if matchAll(s.Labels(), ms) {
				out.series = append(out.series, s)
			}
		}
		return out
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{SelectMockFunction: sel}}
}

func matchAll(l labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesSet hands out its series in turn.
type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series              { return s.series[s.i] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// Alert is an alert firing at the end of an evaluation: its labels (the
// series', the rule's, alertname) and its annotations, expanded.
type Alert struct {
	Labels      map[string]string
	Annotations map[string]string
}

// evalAlert evaluates an alerting rule every evalInterval from time 0 to
// end over the series, as Prometheus's rule manager does: an alert is
// pending from the first evaluation that returns its series, firing once
// it has been returned for the rule's for, and gone at the first
// evaluation that does not return it. It returns the alerts firing at end.
func evalAlert(t *testing.T, r rulefmt.Rule, series string, end time.Duration) []Alert {
	t.Helper()
	q := loadSeries(t, series)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	query := func(ctx context.Context, expr string, ts time.Time) (promql.Vector, error) {
		qry, err := engine.NewInstantQuery(ctx, q, nil, expr, ts)
		if err != nil {
			return nil, err
		}
		defer qry.Close()
		return qry.Exec(ctx).Vector()
	}
	active := map[string]time.Time{}
	var last promql.Vector
	start := time.Unix(0, 0).UTC()
	for at := time.Duration(0); at <= end; at += evalInterval {
		vec, err := query(t.Context(), r.Expr, start.Add(at))
		if err != nil {
			t.Fatalf("%s at %s: %v", r.Alert, at, err)
		}
		seen := map[string]bool{}
		for _, s := range vec {
			k := withoutName(s.Metric).String()
			seen[k] = true
			if _, ok := active[k]; !ok {
				active[k] = start.Add(at)
			}
		}
		for k := range active {
			if !seen[k] {
				delete(active, k)
			}
		}
		last = vec
	}
	var out []Alert
	now := start.Add(end)
	for _, s := range last {
		if now.Sub(active[withoutName(s.Metric).String()]) >= time.Duration(r.For) {
			out = append(out, expandAlert(t, r, s, now, query))
		}
	}
	return out
}

func withoutName(l labels.Labels) labels.Labels {
	return labels.NewBuilder(l).Del(model.MetricNameLabel).Labels()
}

// expandAlert makes the alert of a sample: labels and annotations
// expanded as Prometheus expands them; a template that fails fails the
// test.
func expandAlert(t *testing.T, r rulefmt.Rule, s promql.Sample, now time.Time, query template.QueryFunc) Alert {
	t.Helper()
	series := withoutName(s.Metric).Map()
	data := template.AlertTemplateData(series, nil, "", s)
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	expand := func(what, text string) string {
		out, err := template.NewTemplateExpander(t.Context(), defs+text, "__alert_"+r.Alert, data,
			model.Time(now.UnixMilli()), query, &url.URL{}, nil).Expand()
		if err != nil {
			t.Errorf("%s: %s: %v", r.Alert, what, err)
		}
		return out
	}
	a := Alert{Labels: series, Annotations: map[string]string{}}
	for k, v := range r.Labels {
		a.Labels[k] = expand("label "+k, v)
	}
	a.Labels[labels.AlertName] = r.Alert
	for k, v := range r.Annotations {
		a.Annotations[k] = expand("annotation "+k, v)
	}
	return a
}

// String is the alert's labels, for a failure message.
func (a Alert) String() string { return fmt.Sprint(a.Labels) }
