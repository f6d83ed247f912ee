//go:build e2e

package e2e

import (
	"context"
	"encoding/pem"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secretKeys are the Secret keys whose values must never reach a log:
// passwords (and the connection strings that carry them), private keys,
// and the object store's secret key.
var secretKeys = map[string]bool{
	"password": true, "uri": true, "jdbc-uri": true, "pgpass": true,
	"tls.key": true, "ca.key": true, "client-ca.key": true, "operator.key": true, "private.key": true,
	"SECRET_ACCESS_KEY": true,
}

// privateKeyPEM is any PEM private key, whoever's.
var privateKeyPEM = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)

// checkNoSecretLogged fails the test when a log line of the namespace's
// pods, or of the operator since the test began, holds a secret of the
// namespace's Secrets or any private key (secretsInLogs).
func checkNoSecretLogged(t *testing.T, ns string, since time.Time) {
	t.Helper()
	for _, leak := range secretsInLogs(t, ns, since) {
		t.Error(leak)
	}
}

// secretsInLogs says which Secret key leaked into which log, never the
// value.
func secretsInLogs(t *testing.T, ns string, since time.Time) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	needles, err := secretNeedles(ctx, ns)
	if err != nil {
		t.Logf("cannot read the namespace's Secrets to look for them in logs: %v", err)
		return nil
	}
	logs := namespaceLogs(ctx, ns)
	if out, err := kubectl(ctx, "logs", "-n", operatorNamespace, "-l", "app.kubernetes.io/name=tusk,app.kubernetes.io/component=operator",
		"--all-containers", "--tail=-1", "--since-time="+since.UTC().Format(time.RFC3339)); err == nil {
		logs["operator"] = out
	}
	sources := make([]string, 0, len(logs))
	for s := range logs {
		sources = append(sources, s)
	}
	sort.Strings(sources)
	var leaks []string
	for _, source := range sources {
		text := logs[source]
		if privateKeyPEM.MatchString(text) {
			leaks = append(leaks, "the log of "+source+" holds a PEM private key")
		}
		for what, needle := range needles {
			if strings.Contains(text, needle) {
				leaks = append(leaks, "the log of "+source+" holds "+what)
			}
		}
	}
	sort.Strings(leaks)
	return leaks
}

// TestSecretInALogIsFound: the check every test's namespace gets finds a
// password a pod printed.
func TestSecretInALogIsFound(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	since := time.Now()
	createSecret(t, ns, "leaky", map[string][]byte{"password": []byte("a-password-that-leaks")})
	pod := restrictedPod("leaky", "sh", "-c", "echo connecting with a-password-that-leaks")
	createPod(t, ns, pod)
	var leaks []string
	eventually(t, time.Minute, "the leak seen", func(context.Context) (bool, error) {
		leaks = secretsInLogs(t, ns, since)
		return len(leaks) > 0, nil
	})
	if want := "the log of leaky/main (previous: false) holds Secret leaky key password"; len(leaks) != 1 || leaks[0] != want {
		t.Errorf("found %q, want %q", leaks, want)
	}
	// Gone with its pod, so the namespace's own check passes.
	if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the leaky pod gone", func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil, nil
	})
}

// secretNeedles maps "Secret <name> key <key>" to a string that appears
// in any copy of the value: the value itself, or for a PEM key the
// longest line of its body.
func secretNeedles(ctx context.Context, ns string) (map[string]string, error) {
	secrets, err := clientset.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	needles := map[string]string{}
	for _, s := range secrets.Items {
		for key, value := range s.Data {
			if !secretKeys[key] {
				continue
			}
			needle := strings.TrimSpace(string(value))
			if block, _ := pem.Decode(value); block != nil {
				needle = longestLine(string(value))
			}
			if len(needle) >= 12 { // short values would match by chance
				needles[fmt.Sprintf("Secret %s key %s", s.Name, key)] = needle
			}
		}
	}
	return needles, nil
}

func longestLine(s string) string {
	var longest string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "-----") && len(l) > len(longest) {
			longest = l
		}
	}
	return longest
}

// namespaceLogs returns each container's log (and its previous run's) by
// "pod/container"; a log that cannot be read is left out.
func namespaceLogs(ctx context.Context, ns string) map[string]string {
	logs := map[string]string{}
	pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return logs
	}
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, previous := range []bool{false, true} {
				out, err := kubectl(ctx, "logs", "-n", ns, p.Name, "-c", c.Name, fmt.Sprintf("--previous=%t", previous))
				if err == nil && out != "" {
					logs[fmt.Sprintf("%s/%s (previous: %t)", p.Name, c.Name, previous)] = out
				}
			}
		}
	}
	return logs
}
