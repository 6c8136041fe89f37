// Package cluster runs a real single-node Kubernetes cluster on the local
// machine for carve's end-to-end tests and demo: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd and a kubelet, all
// listening on 127.0.0.1 only, all under one temporary root directory.
//
// The Kubernetes components are built from k8s.io/kubernetes at
// KubernetesVersion() and containerd from its Go module at
// ContainerdVersion (once per release; they are cached), so that CDI devices
// are injected into containers (see Cluster.CDIDir); etcd, runc, the CNI
// loopback plugin and busybox come from Debian packages installed on first
// use. No registry is needed: the cluster has one
// image, BusyboxImage, imported from a locally built archive. Pods must use
// hostNetwork and imagePullPolicy: Never.
//
// Running a cluster needs root (containers, mounts, cgroups). Only one cluster
// runs per machine at a time, because the kubelet's device-plugin directory
// is fixed (see DefaultLockPath); Start waits for its turn.
package cluster
