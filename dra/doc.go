// Package dra describes the GPUs and MIG devices carve made as Dynamic
// Resource Allocation devices (resource.k8s.io/v1): one device per whole
// GPU outside MIG mode and one per complete MIG device, named and
// attributed so that a user of NVIDIA's DRA driver recognises them, in the
// pool of one node of the driver DriverName; and each GPU whose MIG
// devices are made on demand (DynamicGPU) as partitionable devices, a
// counter set and a device per legal placement (package partitionable).
//
// It only describes; publishing the ResourceSlice and preparing claims are
// the kubelet plugin's job.
package dra
