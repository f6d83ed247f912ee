package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"tusk.dev/tusk/internal/instanceapi"
)

// instanceClient talks to the instance managers of one cluster over HTTPS,
// trusting only the cluster's CA and presenting the operator's client
// certificate, which the instance managers require for /status and every
// command.
type instanceClient struct {
	http       *http.Client
	serverName string
	// port is the managers' port: instanceapi.DefaultStatusPort.
	port int
	// timeout is each call's deadline: callTimeout.
	timeout func(path string) time.Duration
}

// instanceClients caches one client per cluster, rebuilt when the cluster's
// CA Secret changes.
type instanceClients struct {
	mu      sync.Mutex
	clients map[types.NamespacedName]cachedInstanceClient
}

type cachedInstanceClient struct {
	version string
	client  *instanceClient
}

// get returns the client for the cluster whose operator-only CA Secret is
// caSecret; serverName is a name the instances' certificate covers.
func (c *instanceClients) get(cluster types.NamespacedName, caSecret *corev1.Secret, serverName string) (*instanceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The hash annotation changes exactly when the Secret's content does.
	version := caSecret.Annotations[AnnotationHash]
	if cached, ok := c.clients[cluster]; ok && cached.version == version {
		return cached.client, nil
	}
	client, err := newInstanceClient(caSecret.Data, serverName)
	if err != nil {
		return nil, err
	}
	if c.clients == nil {
		c.clients = map[types.NamespacedName]cachedInstanceClient{}
	}
	c.clients[cluster] = cachedInstanceClient{version: version, client: client}
	return client, nil
}

// forget drops a deleted cluster's client.
func (c *instanceClients) forget(cluster types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.clients, cluster)
}

func newInstanceClient(data map[string][]byte, serverName string) (*instanceClient, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[keyCACert]) {
		return nil, errors.New("the cluster's CA Secret has no usable ca.crt")
	}
	cert, err := tls.X509KeyPair(data[keyOperatorCert], data[keyOperatorKey])
	if err != nil {
		return nil, fmt.Errorf("while loading the operator's client certificate: %w", err)
	}
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
			ServerName:   serverName,
			MinVersion:   tls.VersionTLS12,
		},
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		TLSHandshakeTimeout: 2 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &instanceClient{http: &http.Client{Transport: transport}, serverName: serverName,
		port: instanceapi.DefaultStatusPort, timeout: callTimeout}, nil
}

// status asks the pod's instance manager for its report.
func (ic *instanceClient) status(ctx context.Context, pod *corev1.Pod) (instanceapi.Status, error) {
	var st instanceapi.Status
	err := ic.call(ctx, pod, http.MethodGet, instanceapi.PathStatus, nil, &st)
	return st, err
}

// call sends one request to the pod's instance manager and decodes the
// JSON answer into out; an answer other than 2xx is an *instanceAPIError
// quoting it. The call ends by callTimeout(path) at the latest.
func (ic *instanceClient) call(parent context.Context, pod *corev1.Pod, method, path string, body, out any) error {
	if pod.Status.PodIP == "" {
		return fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	bound := ic.timeout(path)
	ctx, cancel := context.WithTimeout(parent, bound)
	defer cancel()
	err := ic.send(ctx, pod, method, path, body, out)
	if err != nil && ctx.Err() != nil && parent.Err() == nil {
		return fmt.Errorf("%s %s on %s did not answer within %s: %w", method, path, pod.Name, bound, err)
	}
	return err
}

// send is call without its deadline.
func (ic *instanceClient) send(ctx context.Context, pod *corev1.Pod, method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	url := "https://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(ic.port)) + path
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ic.http.Do(req)
	if err != nil {
		return fmt.Errorf("while calling %s %s on %s: %w", method, path, pod.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &instanceAPIError{method: method, path: path, pod: pod.Name, code: resp.StatusCode, body: string(bytes.TrimSpace(data))}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// instanceAPIError is an instance manager's answer other than 2xx.
type instanceAPIError struct {
	method, path, pod string
	code              int
	body              string
}

func (e *instanceAPIError) Error() string {
	return fmt.Sprintf("%s %s on %s answered %d: %s", e.method, e.path, e.pod, e.code, e.body)
}

// message is the "error" of the answer's JSON body, else the body.
func (e *instanceAPIError) message() string {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(e.body), &body) == nil && body.Error != "" {
		return body.Error
	}
	return e.body
}

// apiErrorCode is the HTTP status of an instance manager's answer that
// was an error, or 0 when err is not such an answer (the call failed).
func apiErrorCode(err error) (int, *instanceAPIError) {
	if e, ok := errors.AsType[*instanceAPIError](err); ok {
		return e.code, e
	}
	return 0, nil
}

// startBackup asks the pod's instance manager to take backup name.
func (ic *instanceClient) startBackup(ctx context.Context, pod *corev1.Pod, name string) (instanceapi.BackupStatus, error) {
	var st instanceapi.BackupStatus
	err := ic.call(ctx, pod, http.MethodPost, instanceapi.PathBackups, instanceapi.BackupRequest{Name: name}, &st)
	return st, err
}

// switchWAL asks the pod's instance manager, a primary's, to switch WAL.
func (ic *instanceClient) switchWAL(ctx context.Context, pod *corev1.Pod) (instanceapi.WALSwitchResult, error) {
	var res instanceapi.WALSwitchResult
	err := ic.call(ctx, pod, http.MethodPost, instanceapi.PathWALSwitch, nil, &res)
	return res, err
}

// backupStatus asks the pod's instance manager about backup name.
func (ic *instanceClient) backupStatus(ctx context.Context, pod *corev1.Pod, name string) (instanceapi.BackupStatus, error) {
	var st instanceapi.BackupStatus
	err := ic.call(ctx, pod, http.MethodGet, instanceapi.PathBackups+"/"+name, nil, &st)
	return st, err
}
