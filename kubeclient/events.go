package kubeclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventSink writes the Events of client-go's event broadcaster
// (record.EventSink) through an Interface, each into its own namespace, as
// client-go's typed sink does.
type EventSink struct {
	// Client writes the Events.
	Client Interface
}

// Create writes a new Event.
func (s EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Create(context.TODO(), e, metav1.CreateOptions{})
}

// Update replaces an Event (a repeated one, with its count raised).
func (s EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Update(context.TODO(), e, metav1.UpdateOptions{})
}

// Patch applies a strategic merge patch to an Event.
func (s EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Patch(context.TODO(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
