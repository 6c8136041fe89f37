package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// serviceCIDR is the cluster's service IP range; nothing routes to it (pods
// use the host network) but the API server requires one.
const serviceCIDR = "10.96.0.0/16"

// credentials are the identities the components and the tests use, all
// static bearer tokens checked by the API server's token file.
type credentials struct {
	admin, scheduler, controllerManager, kubelet string
}

// newCredentials makes fresh random tokens.
func newCredentials() (credentials, error) {
	var c credentials
	for _, t := range []*string{&c.admin, &c.scheduler, &c.controllerManager, &c.kubelet} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return c, fmt.Errorf("generate token: %w", err)
		}
		*t = hex.EncodeToString(b)
	}
	return c, nil
}

// tokenFile renders the API server's --token-auth-file: token,user,uid,groups.
func (c credentials) tokenFile(nodeName string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s,%s,%s,%q\n", c.admin, "carve-admin", "carve-admin", "system:masters")
	fmt.Fprintf(&b, "%s,%s,%s\n", c.scheduler, "system:kube-scheduler", "system:kube-scheduler")
	fmt.Fprintf(&b, "%s,%s,%s\n", c.controllerManager, "system:kube-controller-manager", "system:kube-controller-manager")
	fmt.Fprintf(&b, "%s,%s,%s,%q\n", c.kubelet, "system:node:"+nodeName, "system:node:"+nodeName, "system:nodes")
	return b.String()
}

// pki holds the cluster's key material as PEM.
type pki struct {
	caCert, caKey         []byte
	servingCert, servingK []byte
	saKey, saPub          []byte
}

// newPKI makes a CA, an API server serving certificate for the loopback
// address and the in-cluster names, and the service-account signing key.
func newPKI() (pki, error) {
	var p pki
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "carve-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return p, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("parse CA certificate: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("generate serving key: %w", err)
	}
	_, svcNet, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return p, fmt.Errorf("parse service CIDR: %w", err)
	}
	firstSvc := make(net.IP, len(svcNet.IP.To4()))
	copy(firstSvc, svcNet.IP.To4())
	firstSvc[3]++
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), firstSvc},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, srvKey.Public(), caKey)
	if err != nil {
		return p, fmt.Errorf("create serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, fmt.Errorf("generate service-account key: %w", err)
	}
	p.caCert = pemEncode("CERTIFICATE", caDER)
	p.servingCert = pemEncode("CERTIFICATE", srvDER)
	if p.caKey, err = privateKeyPEM(caKey); err != nil {
		return p, err
	}
	if p.servingK, err = privateKeyPEM(srvKey); err != nil {
		return p, err
	}
	if p.saKey, err = privateKeyPEM(saKey); err != nil {
		return p, err
	}
	if p.saPub, err = publicKeyPEM(saKey.Public()); err != nil {
		return p, err
	}
	return p, nil
}

func pemEncode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func privateKeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pemEncode("EC PRIVATE KEY", der), nil
}

func publicKeyPEM(k crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pemEncode("PUBLIC KEY", der), nil
}

// writeKubeconfig writes a kubeconfig for server that authenticates with a
// bearer token and trusts caPEM.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["carve-e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["carve-e2e"] = &clientcmdapi.Context{Cluster: "carve-e2e", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "carve-e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// containerdConfig renders containerd's configuration in format version 3
// (containerd 2.x, see ContainerdVersion): private root, state and sockets,
// the local image as sandbox image, the CNI loopback network, and the
// cluster's own CDI spec directory as the only one (not the host's /etc/cdi
// and /var/run/cdi). CDI is always on in containerd 2.
func containerdConfig(p paths, cniBinDir string) string {
	q := strconv.Quote
	return fmt.Sprintf(`# Generated by carve test/cluster for containerd %s.
version = 3
root = %s
state = %s
oom_score = 0

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %s

# NRI would serve /var/run/nri/nri.sock for the whole machine; the cluster
# runs no NRI plugins.
[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %s

[plugins."io.containerd.cri.v1.runtime"]
  # The build machines refuse negative oom_score_adj; without this every
  # sandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  enable_selinux = false
  max_container_log_line_size = 16384
  cdi_spec_dirs = [%s]

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%s]
    conf_dir = %s

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, ContainerdVersion, q(p.containerdRoot), q(p.containerdState), q(p.containerdSocket), q(p.containerdSocket+".ttrpc"),
		q(filepath.Join(p.containerdRoot, "opt")), q(BusyboxImage), q(p.cdiDir), q(cniBinDir), q(p.cniConfDir))
}

// cniConfig is a loopback-only network: pods use the host network, but the
// runtime reports its network ready only once some CNI config loads.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "carve-loopback",
  "plugins": [{"type": "loopback"}]
}
`

// kubeletConfig renders the kubelet's configuration file.
func kubeletConfig(p paths, ports ports, cgroupRoot string) ([]byte, error) {
	cfg := kubeletconfig.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:  "127.0.0.1",
		Port:     int32(ports.kubelet),
		// The read-only port would listen on 0.0.0.0:10255; keep it off.
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        new(int32(ports.kubeletHealthz)),
		Authentication: kubeletconfig.KubeletAuthentication{
			Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: new(true)},
			Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: new(false)},
		},
		Authorization:            kubeletconfig.KubeletAuthorization{Mode: kubeletconfig.KubeletAuthorizationModeAlwaysAllow},
		ContainerRuntimeEndpoint: "unix://" + p.containerdSocket,
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               cgroupRoot,
		CgroupsPerQOS:            new(true),
		FailCgroupV1:             new(false),
		FailSwapOn:               new(false),
		PodLogsDir:               p.podLogsDir,
		// Fast feedback for tests: frequent status updates and syncs.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 2 * time.Second},
		NodeStatusReportFrequency: metav1.Duration{Duration: 10 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
		FileCheckFrequency:        metav1.Duration{Duration: 10 * time.Second},
		// The test image can never be pulled again: never collect it, and do
		// not evict or taint the node because a developer's disk is full.
		ImageGCHighThresholdPercent: new(int32(100)),
		ImageGCLowThresholdPercent:  new(int32(99)),
		EvictionHard: map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "0%",
			"nodefs.inodesFree": "0%",
			"imagefs.available": "0%",
		},
		RegisterNode:       new(true),
		RotateCertificates: false,
		ServerTLSBootstrap: false,
		EnableServer:       new(true),
		MaxPods:            110,
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode kubelet config: %w", err)
	}
	return data, nil
}

// writeFiles writes each path with its content and mode, creating parents.
func writeFiles(files map[string][]byte, mode os.FileMode) error {
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", path, err)
		}
		if err := os.WriteFile(path, data, mode); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
