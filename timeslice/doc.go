// Package timeslice turns the GPUs of a node and the sharing settings of the
// profile in force into the resources carve advertises: whole GPUs, MIG
// devices and their time-sliced replicas, with names as api/v1 forms them
// and device IDs "<uuid>" or "<uuid>::<replica>".
package timeslice
