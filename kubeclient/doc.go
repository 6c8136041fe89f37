// Package kubeclient is the part of the Kubernetes API that carve-agent
// uses, as small interfaces, and a client for just that part.
//
// client-go's clientset covers every API group, and linking it (or any of
// its typed clients, which all register every group's types in one scheme
// when the program starts) costs a node agent several MiB of resident
// memory for types it never reads. New builds a client over rest.Interface
// that knows only the groups carve talks to: core (Nodes, ConfigMaps, Pods,
// Events, and evictions through policy/v1), coordination.k8s.io (Leases)
// and resource.k8s.io (ResourceSlices, ResourceClaims).
//
// The interfaces have client-go's method signatures, so client-go's typed
// clients satisfy them: package kubeclient/clientset wraps a
// kubernetes.Interface (a real clientset, or client-go's fake in tests) as
// an Interface. That package links the clientset; the agent's binary does
// not import it.
package kubeclient
