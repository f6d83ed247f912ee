package monitoring

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type podMonitor struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []struct {
				Key string `json:"key"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Scheme      string `json:"scheme"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
				Replacement  string   `json:"replacement"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type scrapeJob struct {
	JobName string `json:"job_name"`
	Scheme  string `json:"scheme"`
	Relabel []struct {
		SourceLabels []string `json:"source_labels"`
		TargetLabel  string   `json:"target_label"`
		Regex        string   `json:"regex"`
		Action       string   `json:"action"`
	} `json:"relabel_configs"`
}

// TestPodMonitorsMatchTheScrapeConfigs: each PodMonitor and the plain
// Prometheus job of the same name select the same pods by the same labels
// and port, with the same scheme, and give their series the same labels,
// so the rules work with either. (The Prometheus Operator adds namespace
// to every target itself.)
func TestPodMonitorsMatchTheScrapeConfigs(t *testing.T) {
	var jobs []scrapeJob
	readYAML(t, monitoringPath("prometheus", "scrape-configs.yaml"), &jobs)
	files, err := filepath.Glob(monitoringPath("podmonitor-*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PodMonitor: %v", err)
	}
	var monitored []string
	for _, file := range files {
		var pm podMonitor
		readYAML(t, file, &pm)
		if len(pm.Spec.Endpoints) != 1 {
			t.Fatalf("%s: %d endpoints, want 1", pm.Metadata.Name, len(pm.Spec.Endpoints))
		}
		ep := pm.Spec.Endpoints[0]
		labels := []string{"namespace"}
		for _, r := range ep.Relabelings {
			if r.TargetLabel == "job" && r.Replacement != pm.Metadata.Name {
				t.Errorf("PodMonitor %s names its job %s", pm.Metadata.Name, r.Replacement)
			}
			if r.TargetLabel != "job" {
				labels = append(labels, r.TargetLabel)
			}
		}
		monitored = append(monitored, pm.Metadata.Name)
		i := slices.IndexFunc(jobs, func(j scrapeJob) bool { return j.JobName == pm.Metadata.Name })
		if i < 0 {
			t.Errorf("scrape-configs.yaml has no job %s", pm.Metadata.Name)
			continue
		}
		job := jobs[i]
		if job.Scheme != ep.Scheme {
			t.Errorf("%s: the job's scheme is %s, the PodMonitor's %s", job.JobName, job.Scheme, ep.Scheme)
		}
		var keep []string
		var keepRegex string
		jobLabels := []string{"namespace"}
		for _, r := range job.Relabel {
			if r.Action == "keep" {
				keep, keepRegex = r.SourceLabels, r.Regex
			}
			if r.TargetLabel != "" && r.TargetLabel != "namespace" {
				jobLabels = append(jobLabels, r.TargetLabel)
			}
		}
		if !strings.HasSuffix(keepRegex, ";"+ep.Port) || !slices.Contains(keep, "__meta_kubernetes_pod_container_port_name") {
			t.Errorf("%s: the job does not keep port %s alone (%v =~ %s)", job.JobName, ep.Port, keep, keepRegex)
		}
		for _, key := range selectorKeys(pm) {
			if !slices.Contains(keep, "__meta_kubernetes_pod_label_"+key) {
				t.Errorf("%s: the job does not select pods by the PodMonitor's label %s (keeps %v)", job.JobName, key, keep)
			}
		}
		slices.Sort(labels)
		slices.Sort(jobLabels)
		if !slices.Equal(labels, jobLabels) {
			t.Errorf("%s: the PodMonitor's targets carry %v, the job's %v", job.JobName, labels, jobLabels)
		}
	}
	if len(monitored) != len(jobs) {
		t.Errorf("PodMonitors %v, jobs %d: each job needs its PodMonitor", monitored, len(jobs))
	}
}

// selectorKeys are the pod labels a PodMonitor selects by, as Prometheus'
// service discovery names them (__meta_kubernetes_pod_label_<key>).
func selectorKeys(pm podMonitor) []string {
	sanitize := regexp.MustCompile(`[^a-zA-Z0-9_]`)
	var keys []string
	for k := range pm.Spec.Selector.MatchLabels {
		keys = append(keys, sanitize.ReplaceAllString(k, "_"))
	}
	for _, e := range pm.Spec.Selector.MatchExpressions {
		keys = append(keys, sanitize.ReplaceAllString(e.Key, "_"))
	}
	return keys
}
