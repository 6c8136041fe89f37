package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// secretToken is the bearer token of the test kubeconfig.
const secretToken = "carve-test-token-3f9a61c2d84e47b0a5c1"

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// verboseKlog sends klog's output, client-go's own logging, at its most
// verbose (-v=10: every request with its headers, every response body)
// to the returned buffer until the test ends.
func verboseKlog(t *testing.T) *syncBuffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	set := func(values map[string]string) {
		for k, v := range values {
			if err := fs.Set(k, v); err != nil {
				t.Fatalf("klog -%s=%s: %v", k, v, err)
			}
		}
	}
	out := &syncBuffer{}
	set(map[string]string{"v": "10", "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"})
	klog.SetOutput(out)
	t.Cleanup(func() {
		klog.Flush()
		set(map[string]string{"v": "0", "logtostderr": "true", "stderrthreshold": "ERROR"})
		klog.SetOutput(os.Stderr)
	})
	return out
}

// clientKey returns a client certificate and its key, PEM-encoded.
func clientKey(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "carve-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// writeKubeconfig writes a kubeconfig for server (its CA in caPEM) with
// secretToken and a client key, and returns its path and the secrets in
// it, in every form they could be printed in.
func writeKubeconfig(t *testing.T, server string, caPEM []byte, broken bool) (string, []string) {
	t.Helper()
	certPEM, keyPEM := clientKey(t)
	b64 := base64.StdEncoding.EncodeToString
	block, _ := pem.Decode(keyPEM)
	keyBody := strings.Split(string(keyPEM), "\n")[1] // the first line of the key's base64
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: u
  user:
    token: %s
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, server, b64(caPEM), secretToken, b64(certPEM), b64(keyPEM))
	if broken {
		cfg += "preferences: [\n"
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, []string{secretToken, b64(keyPEM), keyBody, b64(block.Bytes)[:40]}
}

// apiServer is a stand-in API server that answers every request with
// status and counts the requests that carried secretToken.
func apiServer(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var withToken atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+secretToken {
			withToken.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"%s","reason":"%s","code":%d}`,
			http.StatusText(status), strings.ReplaceAll(http.StatusText(status), " ", ""), status)
	}))
	t.Cleanup(srv.Close)
	return srv, &withToken
}

// TestLogsHoldNoSecrets runs carve-agent at --log-level debug, with
// client-go's own logging (klog) at -v=10, against an API server that
// refuses it, forbids it or is gone, and with a kubeconfig that does not
// parse: neither the kubeconfig's token nor its client key shows in
// anything it prints, while the requests did carry the token and klog
// logged them (with the Authorization header masked).
func TestLogsHoldNoSecrets(t *testing.T) {
	tests := []struct {
		name string
		// status is what the API server answers; 0: no server listens.
		status int
		broken bool
	}{
		{name: "token refused", status: http.StatusUnauthorized},
		{name: "forbidden", status: http.StatusForbidden},
		{name: "server error", status: http.StatusInternalServerError},
		{name: "no API server", status: 0},
		{name: "kubeconfig does not parse", status: http.StatusUnauthorized, broken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			klogOut := verboseKlog(t)
			srv, withToken := apiServer(t, max(tt.status, http.StatusOK))
			caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			if tt.status == 0 {
				srv.Close()
			}
			path, secrets := writeKubeconfig(t, srv.URL, caPEM, tt.broken)
			logs := runAgentBriefly(t, path)
			klog.Flush()
			out := map[string]string{"the agent's log": logs, "klog": klogOut.String()}
			for where, text := range out {
				for _, s := range secrets {
					if strings.Contains(text, s) {
						t.Errorf("%s holds the secret %q:\n%s", where, s, text)
					}
				}
			}
			if tt.broken {
				if !strings.Contains(logs, "API access") {
					t.Errorf("the agent's log does not say the kubeconfig failed:\n%s", logs)
				}
				return
			}
			if !strings.Contains(logs, "carve-agent started") {
				t.Errorf("the agent never started:\n%s", logs)
			}
			if tt.status == 0 {
				return
			}
			if withToken.Load() == 0 {
				t.Error("no request carried the token: the test proves nothing")
			}
			if k := klogOut.String(); !strings.Contains(k, "Authorization: Bearer <masked>") {
				t.Errorf("klog at -v=10 did not log the requests' headers (masked):\n%s", k)
			}
		})
	}
}

// runAgentBriefly runs carve-agent, as main does, at --log-level debug
// with the kubeconfig for two seconds on simulated GPUs and returns
// everything it printed: flag errors, its log, and the error it stopped
// with, which main logs last.
func runAgentBriefly(t *testing.T, kubeconfig string) string {
	t.Helper()
	var out syncBuffer
	o, err := parseOptions([]string{"--node-name", "n1", "--kubeconfig", kubeconfig, "--gpus", "sim:a30x4",
		"--advertise", "none", "--pod-resources-socket", "none", "--state-dir", t.TempDir(),
		"--metrics-addr", "127.0.0.1:0", "--log-level", "debug"}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: o.logLevel}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := run(ctx, o, func(string) string { return "" }, log); err != nil {
		log.Error("carve-agent stopped", "err", err)
	}
	return out.String()
}
