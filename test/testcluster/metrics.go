package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Metrics scrapes the apiserver's own /metrics.
func (a *APIServer) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	hc, err := rest.HTTPClientFor(a.AdminConfig())
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.c.adminToken)
	req.Header.Set("Accept", "text/plain")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", a.URL(), resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// EtcdMetrics scrapes etcd's /metrics, e.g. etcd_debugging_mvcc_compact_revision.
func (c *Cluster) EtcdMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return etcdMetrics(ctx, c.etcdURL)
}

// EventsEtcdMetrics is the /metrics of the events' etcd (Options.EventsEtcd).
func (c *Cluster) EventsEtcdMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	if c.eventsEtcd == nil {
		return nil, errors.New("no etcd of their own for events: Options.EventsEtcd is off")
	}
	return etcdMetrics(ctx, c.eventsURL)
}

func etcdMetrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// MetricValue returns the value of the one gauge, counter or untyped sample
// of family name whose labels include want, e.g.
// MetricValue(ctx, "watch_cache_capacity", map[string]string{"resource": "configmaps"}).
func (a *APIServer) MetricValue(ctx context.Context, name string, want map[string]string) (float64, error) {
	fams, err := a.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return Value(fams, name, want)
}

// Value finds one sample in scraped families; see MetricValue.
func Value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, error) {
	fam, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("metric %s not exposed", name)
	}
	var found []float64
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			found = append(found, m.GetGauge().GetValue())
		case m.Counter != nil:
			found = append(found, m.GetCounter().GetValue())
		case m.Untyped != nil:
			found = append(found, m.GetUntyped().GetValue())
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("metric %s%v: %d matching samples, want 1", name, want, len(found))
	}
	return found[0], nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
