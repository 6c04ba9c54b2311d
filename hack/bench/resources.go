package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// resourcesDur is how long each exporter of resourcesCost is measured.
const resourcesDur = 2 * time.Minute

// resourcesCost measures what --resources=all adds: requests per second to
// the apiserver by verb (from its apiserver_request_total), CPU of the
// apiserver, etcd and the exporter, and the exporter's RSS, against a
// passive exporter without --resources over the same time.
func resourcesCost(ctx context.Context, r *report, c *testcluster.Cluster, exe, kubeconfig string) error {
	type result struct {
		requests               map[string]float64 // by verb, per second
		apiserver, etcd, cpu   float64            // % of one core
		rss                    float64
		resources, compactions float64
	}
	measure := func(args ...string) (*result, error) {
		e, err := startExporter(exe, kubeconfig, append([]string{"--load.rate=0"}, args...)...)
		if err != nil {
			return nil, err
		}
		defer e.stop()
		sleep(ctx, 20*time.Second)
		pid := e.cmd.Process.Pid
		before, err := requestsByVerb(ctx, c)
		if err != nil {
			return nil, err
		}
		a0, e0, x0, t0 := cpu(c.APIServer().PID()), cpu(c.EtcdPID()), cpu(pid), time.Now()
		rss := 0.0
		for time.Since(t0) < resourcesDur && ctx.Err() == nil {
			rss = math.Max(rss, rssMiB(pid))
			sleep(ctx, time.Second)
		}
		dt := time.Since(t0).Seconds()
		after, err := requestsByVerb(ctx, c)
		if err != nil {
			return nil, err
		}
		res := &result{requests: map[string]float64{}, rss: rss,
			apiserver: 100 * (cpu(c.APIServer().PID()) - a0) / dt, etcd: 100 * (cpu(c.EtcdPID()) - e0) / dt, cpu: 100 * (cpu(pid) - x0) / dt,
			compactions: e.metric("watchcache_resource_compaction_probes_total")}
		for verb, n := range after {
			res.requests[verb] = (n - before[verb]) / dt
		}
		res.resources = float64(countSeries(e, "watchcache_resource_objects"))
		return res, ctx.Err()
	}
	base, err := measure()
	if err != nil {
		return err
	}
	all, err := measure("--resources=all", "--resources.interval=10s")
	if err != nil {
		return err
	}
	fmt.Fprintf(r, "\n## 6. Every resource's window: what --resources=all costs\n\nTwo passive exporters (`--load.rate=0`) one after the other, each measured over %s after a 20 s warm-up: without `--resources`, then with `--resources=all --resources.interval=10s`, which resolved %.0f resources on this apiserver. Requests are the apiserver's own count (`apiserver_request_total`, every client, so the difference is the exporter's share).\n\n", resourcesDur, all.resources)
	fmt.Fprintln(r, "| | LIST/s | WATCH/s | all requests/s | apiserver CPU % | etcd CPU % | exporter CPU % | exporter max RSS MiB |")
	fmt.Fprintln(r, "|---|---|---|---|---|---|---|---|")
	row := func(name string, x *result) {
		total := 0.0
		for _, v := range x.requests {
			total += v
		}
		fmt.Fprintf(r, "| %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f |\n", name, x.requests["LIST"], x.requests["WATCH"], total, x.apiserver, x.etcd, x.cpu, x.rss)
	}
	row("passive", base)
	row("passive, --resources=all", all)
	added := map[string]float64{}
	for _, v := range []string{"LIST", "WATCH"} {
		added[v] = all.requests[v] - base.requests[v]
	}
	expect := all.resources / 10
	fmt.Fprintf(r, "\nAdded by the probes: %.2f LIST/s and %.2f WATCH/s, against %.1f/s each expected (one list with limit=1 and one watch from RV 1 per resource and 10 s; configmaps' watch is the quiet ConfigMap's probe already); %.1f%% of a core on the apiserver, %.1f%% on etcd, %.2f%% in the exporter, %+.1f MiB of RSS. Compaction probes: %.0f (no resource had its cache off).\n",
		added["LIST"], added["WATCH"], expect, all.apiserver-base.apiserver, all.etcd-base.etcd, all.cpu-base.cpu, all.rss-base.rss, all.compactions)
	r.target(added["LIST"] <= 1.1*expect && added["WATCH"] <= 1.1*expect,
		"--resources=all at 10 s: at most one LIST and one WATCH per resource and interval (+10%)",
		fmt.Sprintf("%.0f resources: %.2f LIST/s, %.2f WATCH/s added (%.1f/s each expected)", all.resources, added["LIST"], added["WATCH"], expect))
	return nil
}

// requestsByVerb sums the apiserver's apiserver_request_total by verb.
func requestsByVerb(ctx context.Context, c *testcluster.Cluster) (map[string]float64, error) {
	fams, err := c.APIServer().Metrics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		out[labelValue(m, "verb")] += m.GetCounter().GetValue()
	}
	return out, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// countSeries counts the series of a family on the exporter's /metrics.
func countSeries(e *exporterProc, name string) int {
	fams, err := e.families()
	if err != nil {
		return 0
	}
	return len(fams[name].GetMetric())
}

// replaceSection puts section (it starts with "## N. ") into the report at
// path in place of the old section N, or at its end, and its summary rows
// (targets) into the summary table in place of those of the same target:
// for -only, which runs one section.
func replaceSection(path, section string, targets []string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	section = strings.TrimPrefix(section, "\n")
	head := section[:strings.Index(section, ". ")+2] // "## 6. "
	if i := strings.Index(s, "\n"+head); i >= 0 {
		end := len(s)
		if j := strings.Index(s[i+1:], "\n## "); j >= 0 {
			end = i + 1 + j + 1
		}
		tail := s[end:]
		if tail != "" {
			tail = "\n" + tail
		}
		s = s[:i+1] + section + tail
	} else if i := strings.Index(s, "\n## 7. "); head == "## 6. " && i >= 0 {
		s = s[:i+1] + section + "\n" + s[i+1:]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	lines := strings.Split(s, "\n")
	for _, t := range targets {
		key := t[:strings.Index(t[2:], " | ")+5] // "| what | "
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key) })
		if i < 0 { // a new target: at the end of the summary table
			h := slices.Index(lines, "|---|---|---|")
			if h < 0 {
				return fmt.Errorf("%s: no summary table", path)
			}
			i = h + 1
			for i < len(lines) && strings.HasPrefix(lines[i], "|") {
				i++
			}
			lines = slices.Insert(lines, i, "")
		}
		lines[i] = t
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}
