package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	kustypes "sigs.k8s.io/kustomize/api/types"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/carve-dev/carve/configs"
	"github.com/carve-dev/carve/desired"
	"github.com/carve-dev/carve/dra"
	"github.com/carve-dev/carve/partition"
	"github.com/carve-dev/carve/test/harness"
	"github.com/carve-dev/carve/timeslice"
)

const (
	// draDoc is the DRA page, whose YAML blocks are checked.
	draDoc = "../../docs/dra.md"
	// draExamples are the DRA example files of configs/examples.
	draExamples = "../../configs/examples/dra/*.yaml"
	// draDeviceClasses are the DeviceClasses configs/deploy/dra creates.
	draDeviceClasses = "../../configs/deploy/components/dra/deviceclasses.yaml"
	// docNode is the node of the example ResourceSlice, and docMachine the
	// simulated machine it describes.
	docNode    = "gpu-node-1"
	docMachine = "h100-80gb*3"
	// docProfile is the profile of docs/dra.md the slice is made from.
	docProfile = "mixed"
)

// yamlBlocks returns the ```yaml blocks of a Markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range harness.Snippets(string(raw)) {
		if s.Lang == "yaml" {
			out = append(out, s.Text)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no yaml blocks", path)
	}
	return out
}

// draDocs holds what docs/dra.md's YAML blocks are.
type draDocs struct {
	// profiles is the carve profile file, objects every Kubernetes object.
	profiles *configs.File
	objects  []*unstructured.Unstructured
}

// readDRADoc sorts docs/dra.md's YAML blocks into a profile file, a
// kustomization and Kubernetes objects, checking each: the profile file
// parses and validates against carve's catalogue, the kustomization
// decodes strictly, and every object decodes strictly into its API type
// and has a name. Any other block fails the test.
func readDRADoc(t *testing.T) draDocs {
	t.Helper()
	var d draDocs
	for i, b := range yamlBlocks(t, draDoc) {
		switch {
		case strings.HasPrefix(b, "version: v1\n"):
			f, err := configs.Parse([]byte(b))
			if err != nil {
				t.Fatalf("%s block %d: profiles: %v", draDoc, i, err)
			}
			if err := f.Validate(partition.NewGeometry(partition.Catalogue()), nil); err != nil {
				t.Errorf("%s block %d: profiles: %v", draDoc, i, err)
			}
			d.profiles = f
		case strings.Contains(b, "kind: Kustomization\n"):
			var k kustypes.Kustomization
			if err := sigsyaml.UnmarshalStrict([]byte(b), &k); err != nil {
				t.Errorf("%s block %d: kustomization: %v", draDoc, i, err)
			}
		default:
			objs, err := harness.DecodeObjects([]byte(b))
			if err != nil {
				t.Fatalf("%s block %d: %v", draDoc, i, err)
			}
			if len(objs) == 0 {
				t.Errorf("%s block %d holds no object", draDoc, i)
			}
			for _, o := range objs {
				if o.GetName() == "" {
					t.Errorf("%s block %d: a %s without a name", draDoc, i, o.GetKind())
				}
				if err := checkTyped(o); err != nil {
					t.Errorf("%s block %d: %v", draDoc, i, err)
				}
			}
			d.objects = append(d.objects, objs...)
		}
	}
	if d.profiles == nil {
		t.Fatalf("%s has no profile file", draDoc)
	}
	return d
}

// readDRAExamples decodes configs/examples/dra/*.yaml, each object
// strictly into its API type.
func readDRAExamples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := harness.DecodeFiles(draExamples)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := checkTyped(o); err != nil {
			t.Errorf("%s in %s: %v", objectKey(o), draExamples, err)
		}
	}
	return objs
}

// TestDRAExamplesAreInTheDocs: every object of configs/examples/dra/*.yaml
// and every YAML block of docs/dra.md decodes strictly (readDRADoc), and
// each example object is in the page, equal field for field, so that the
// two cannot drift apart.
func TestDRAExamplesAreInTheDocs(t *testing.T) {
	doc := readDRADoc(t)
	docByKey := byKey(t, doc.objects)
	for _, o := range readDRAExamples(t) {
		d, ok := docByKey[objectKey(o)]
		if !ok {
			t.Errorf("%s of %s is not in %s", objectKey(o), draExamples, draDoc)
			continue
		}
		if diff := cmp.Diff(d.Object, o.Object); diff != "" {
			t.Errorf("%s differs between %s and %s (-doc +example):\n%s", objectKey(o), draDoc, draExamples, diff)
		}
	}
}

// docSlice returns the ResourceSlice carve's DRA driver describes for
// docs/dra.md's profile on the simulated node: the profile resolved,
// planned and applied on the simulator as the agent does, and the
// resulting GPUs and sharing described by dra.Describe.
func docSlice(t *testing.T, f *configs.File) *resourceapi.ResourceSlice {
	t.Helper()
	lib, node := simNode(t, docMachine)
	st, err := desired.For(f, docProfile, node)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := st.Plan(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	applier := &partition.Applier{Lib: lib}
	for _, p := range plan.GPUs {
		if err := applier.Apply(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := partition.ReadInventory(lib)
	if err != nil {
		t.Fatal(err)
	}
	res, err := timeslice.Expand(gpus, st.Sharing)
	if err != nil {
		t.Fatal(err)
	}
	off, err := dra.Describe(gpus, res)
	if err != nil {
		t.Fatal(err)
	}
	ss := dra.PoolSlices(docNode, off.Devices, off.CounterSets)
	if len(ss) != 1 {
		t.Fatalf("the page's node has %d slices, want 1", len(ss))
	}
	return &ss[0]
}

// typed converts an object to its API type, strictly.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s: %v", objectKey(o), err)
	}
	return out
}

// findTyped returns the object of kind and name among objs, typed.
func findTyped[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	o := harness.FindObject(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s", kind, name)
	}
	return typed[T](t, o)
}

// TestDRADocSliceIsWhatTheDriverPublishes: the ResourceSlice of
// docs/dra.md is, device for device, what carve's driver describes for the
// page's profile on a simulated node of three H100s: names, attributes,
// capacities, sharing. It fails when the driver's description changes and
// the page does not.
func TestDRADocSliceIsWhatTheDriverPublishes(t *testing.T) {
	doc := readDRADoc(t)
	var got *resourceapi.ResourceSlice
	for _, o := range doc.objects {
		if o.GetKind() == "ResourceSlice" {
			got = typed[resourceapi.ResourceSlice](t, o)
		}
	}
	if got == nil {
		t.Fatalf("%s has no ResourceSlice", draDoc)
	}
	want := docSlice(t, doc.profiles)
	if got.Spec.Driver != dra.DriverName || got.Spec.NodeName == nil || *got.Spec.NodeName != docNode ||
		got.Spec.Pool.Name != docNode || got.Spec.Pool.ResourceSliceCount != 1 {
		t.Errorf("the page's slice: driver %s, node %v, pool %+v; want driver %s, node and pool %s, one slice",
			got.Spec.Driver, got.Spec.NodeName, got.Spec.Pool, dra.DriverName, docNode)
	}
	if got.Name != want.Name {
		t.Errorf("the page's slice is named %s; the driver names it %s", got.Name, want.Name)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "Node" || got.OwnerReferences[0].Name != docNode {
		t.Errorf("the page's slice is owned by %+v, want Node %s", got.OwnerReferences, docNode)
	}
	if !equality.Semantic.DeepEqual(want.Spec.Devices, got.Spec.Devices) {
		w, _ := sigsyaml.Marshal(want.Spec.Devices)
		g, _ := sigsyaml.Marshal(got.Spec.Devices)
		t.Errorf("the page's slice is not what the driver describes for profile %s on %s (-driver +page):\n%s",
			docProfile, docMachine, cmp.Diff(string(w), string(g)))
	}
}

// classes lists DeviceClasses for the allocator.
type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: resourceapi.GroupName, Resource: "deviceclasses"}, name)
}

// draAllocator allocates claims from one slice as kube-scheduler does,
// with consumable capacity (on by default since Kubernetes 1.36).
type draAllocator struct {
	slice   *resourceapi.ResourceSlice
	classes classes
}

// allocate allocates claims together on the doc node, nothing allocated
// before; nil means they do not fit.
func (a draAllocator) allocate(t *testing.T, claims ...*resourceapi.ResourceClaim) []resourceapi.AllocationResult {
	t.Helper()
	features := structured.Features{ConsumableCapacity: true}
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	alloc, err := structured.NewAllocator(context.Background(), features, state, a.classes,
		[]*resourceapi.ResourceSlice{a.slice}, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: docNode}}
	claims = slices.Clone(claims)
	for i, c := range claims {
		claims[i] = defaulted(c)
	}
	res, err := alloc.Allocate(context.Background(), node, claims)
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	return res
}

// defaulted returns a copy of a claim with the API server's defaults for
// its requests: allocationMode ExactCount, count 1.
func defaulted(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	for i := range c.Spec.Devices.Requests {
		r := c.Spec.Devices.Requests[i].Exactly
		if r == nil {
			continue
		}
		if r.AllocationMode == "" {
			r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
		}
		if r.AllocationMode == resourceapi.DeviceAllocationModeExactCount && r.Count == 0 {
			r.Count = 1
		}
	}
	return c
}

// devicesOf returns a claim's allocated device names, in result order.
func devicesOf(r resourceapi.AllocationResult) []string {
	var out []string
	for _, d := range r.Devices.Results {
		out = append(out, d.Device)
	}
	return out
}

// deviceNamed returns the slice's device.
func deviceNamed(t *testing.T, s *resourceapi.ResourceSlice, name string) resourceapi.Device {
	t.Helper()
	for _, d := range s.Spec.Devices {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s in the slice", name)
	return resourceapi.Device{}
}

// attr returns a device's string attribute.
func attr(d resourceapi.Device, name string) string {
	if v := d.Attributes[resourceapi.QualifiedName(name)].StringValue; v != nil {
		return *v
	}
	return ""
}

// withName returns a copy of a claim under another name (and UID), for
// allocating several alike.
func withName(c *resourceapi.ResourceClaim, name string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Name, c.UID = name, types.UID("uid-"+name)
	return c
}

// TestDRAExampleClaimsAllocate allocates docs/dra.md's claims from the
// page's slice (TestDRADocSliceIsWhatTheDriverPublishes says it is the
// driver's) with the scheduler's allocator and configs/deploy's
// DeviceClasses, and checks that each gets what the page says: a 1g.10gb
// MIG device; two different 1g.10gb devices of one GPU (while two
// requests may take one shared device twice unless distinctAttribute
// forbids it); a 2g.20gb and a 3g.40gb of one GPU; the one whole GPU that
// is not shared; a share of the shared GPU, four at most, and fewer when
// their memory bookings exceed its memory; the claim the scheduler makes
// for a pod asking for nvidia.com/mig-1g.10gb through the example's
// extended-resource class; and all of them at once.
func TestDRAExampleClaimsAllocate(t *testing.T) {
	doc := readDRADoc(t)
	raw, err := os.ReadFile(draDeviceClasses)
	if err != nil {
		t.Fatal(err)
	}
	deployed, err := harness.DecodeObjects(raw)
	if err != nil {
		t.Fatal(err)
	}
	var cls classes
	for _, o := range slices.Concat(deployed, doc.objects) {
		if o.GetKind() == "DeviceClass" {
			cls = append(cls, typed[resourceapi.DeviceClass](t, o))
		}
	}
	slice := docSlice(t, doc.profiles)
	a := draAllocator{slice: slice, classes: cls}
	claim := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		return withName(findTyped[resourceapi.ResourceClaim](t, doc.objects, "ResourceClaim", name), name)
	}
	one := func(t *testing.T, c *resourceapi.ResourceClaim) []string {
		t.Helper()
		res := a.allocate(t, c)
		if len(res) != 1 {
			t.Fatalf("claim %s was not allocated", c.Name)
		}
		return devicesOf(res[0])
	}

	t.Run("mig-1g10gb", func(t *testing.T) {
		got := one(t, claim("mig-1g10gb"))
		if len(got) != 1 || attr(deviceNamed(t, slice, got[0]), dra.AttrProfile) != "1g.10gb" {
			t.Errorf("got %v, want one 1g.10gb device", got)
		}
	})
	t.Run("two-1g10gb-one-gpu", func(t *testing.T) {
		c := claim("two-1g10gb-one-gpu")
		got := one(t, c)
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("got %v, want two different devices", got)
		}
		d0, d1 := deviceNamed(t, slice, got[0]), deviceNamed(t, slice, got[1])
		if attr(d0, dra.AttrProfile) != "1g.10gb" || attr(d1, dra.AttrProfile) != "1g.10gb" ||
			attr(d0, dra.AttrParentUUID) != attr(d1, dra.AttrParentUUID) {
			t.Errorf("got %v: profiles %s, %s on GPUs %s, %s; want two 1g.10gb of one GPU", got,
				attr(d0, dra.AttrProfile), attr(d1, dra.AttrProfile), attr(d0, dra.AttrParentUUID), attr(d1, dra.AttrParentUUID))
		}
		// Two requests of one claim, on the other hand, may take one
		// shared device twice, unless a distinctAttribute constraint
		// forbids it, as the page says.
		twice := withName(c, "gpu-2-twice")
		twice.Spec.Devices.Constraints = nil
		r := twice.Spec.Devices.Requests[0].Exactly
		r.DeviceClassName, r.Count = "gpu.carve.dev", 1
		r.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "device.allowMultipleAllocations"}}}
		second := *twice.Spec.Devices.Requests[0].DeepCopy()
		second.Name = "mig-2"
		twice.Spec.Devices.Requests = append(twice.Spec.Devices.Requests, second)
		if got := one(t, twice); !slices.Equal(got, []string{"gpu-2", "gpu-2"}) {
			t.Errorf("two requests for a shared whole GPU: got %v, want gpu-2 twice", got)
		}
		twice.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{DistinctAttribute: new(resourceapi.FullyQualifiedName("gpu.carve.dev/uuid"))}}
		if res := a.allocate(t, twice); res != nil {
			t.Errorf("with distinctAttribute two requests were given devices %v of the one shared GPU", devicesOf(res[0]))
		}
	})
	t.Run("2g-and-3g-one-gpu", func(t *testing.T) {
		got := one(t, claim("2g-and-3g-one-gpu"))
		if len(got) != 2 {
			t.Fatalf("got %v, want two devices", got)
		}
		small, large := deviceNamed(t, slice, got[0]), deviceNamed(t, slice, got[1])
		if attr(small, dra.AttrProfile) != "2g.20gb" || attr(large, dra.AttrProfile) != "3g.40gb" ||
			attr(small, dra.AttrParentUUID) != attr(large, dra.AttrParentUUID) {
			t.Errorf("got %v, want a 2g.20gb and a 3g.40gb of one GPU", got)
		}
	})
	t.Run("whole-gpu", func(t *testing.T) {
		if got := one(t, claim("whole-gpu")); !slices.Equal(got, []string{"gpu-1"}) {
			t.Errorf("got %v, want [gpu-1], the whole GPU nobody shares", got)
		}
		if res := a.allocate(t, claim("whole-gpu"), withName(claim("whole-gpu"), "whole-gpu-2")); res != nil {
			t.Errorf("two claims for an unshared whole GPU were allocated: %v", res)
		}
	})
	t.Run("gpu-share", func(t *testing.T) {
		share := claim("gpu-share")
		var four []*resourceapi.ResourceClaim
		for i := range 4 {
			four = append(four, withName(share, fmt.Sprintf("share-%d", i)))
		}
		res := a.allocate(t, four...)
		if len(res) != 4 {
			t.Fatalf("four shares were not allocated")
		}
		for _, r := range res {
			if got := devicesOf(r); !slices.Equal(got, []string{"gpu-2"}) {
				t.Errorf("a share got %v, want [gpu-2], the time-sliced GPU", got)
			}
			if r.Devices.Results[0].ShareID == nil {
				t.Errorf("a share of gpu-2 has no share ID: %+v", r.Devices.Results[0])
			}
		}
		if res := a.allocate(t, append(four, withName(share, "share-4"))...); res != nil {
			t.Errorf("five shares of a GPU time-sliced four times were allocated")
		}
		big := withName(share, "big")
		big.Spec.Devices.Requests[0].Exactly.Capacity.Requests[dra.CapMemory] = resource.MustParse("40Gi")
		if res := a.allocate(t, big, withName(big, "big-2")); res != nil {
			t.Errorf("two shares booking 40Gi each of an 81559Mi GPU were allocated")
		}
	})
	t.Run("extended resource nvidia.com/mig-1g.10gb", func(t *testing.T) {
		class := findTyped[resourceapi.DeviceClass](t, doc.objects, "DeviceClass", "mig-1g.10gb.carve.dev")
		if class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != "nvidia.com/mig-1g.10gb" {
			t.Fatalf("class %s serves %v", class.Name, class.Spec.ExtendedResourceName)
		}
		// The claim kube-scheduler makes for a pod asking for one.
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "cuda-extended-extended-resources-x", Namespace: "default", UID: "uid-ext"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name:    "container-0-request-0",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}}},
		}
		got := one(t, c)
		if len(got) != 1 || attr(deviceNamed(t, slice, got[0]), dra.AttrProfile) != "1g.10gb" {
			t.Errorf("got %v, want one 1g.10gb device", got)
		}
	})
	t.Run("all at once", func(t *testing.T) {
		var all []*resourceapi.ResourceClaim
		for _, o := range doc.objects {
			if o.GetKind() == "ResourceClaim" {
				c := typed[resourceapi.ResourceClaim](t, o)
				all = append(all, withName(c, c.Name))
			}
		}
		if len(all) != 5 {
			t.Errorf("%s has %d ResourceClaims, want 5", draDoc, len(all))
		}
		if res := a.allocate(t, all...); len(res) != len(all) {
			t.Errorf("the page's claims do not fit on its node together")
		}
	})
}

// TestDRATemplateMatchesClaim: the page's ResourceClaimTemplate asks for
// what its claim mig-1g10gb asks for, and its pod names it.
func TestDRATemplateMatchesClaim(t *testing.T) {
	doc := readDRADoc(t)
	tmpl := findTyped[resourceapi.ResourceClaimTemplate](t, doc.objects, "ResourceClaimTemplate", "mig-1g10gb")
	c := findTyped[resourceapi.ResourceClaim](t, doc.objects, "ResourceClaim", "mig-1g10gb")
	if diff := cmp.Diff(c.Spec, tmpl.Spec.Spec); diff != "" {
		t.Errorf("template and claim mig-1g10gb differ (-claim +template):\n%s", diff)
	}
	pod := findTyped[corev1.Pod](t, doc.objects, "Pod", "cuda-smoke")
	if len(pod.Spec.ResourceClaims) != 1 || pod.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil ||
		*pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != tmpl.Name ||
		len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].Resources.Claims) != 1 ||
		pod.Spec.Containers[0].Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
		t.Errorf("pod cuda-smoke does not use the template through one claim: %+v", pod.Spec)
	}
}

// TestDRADocsLinks: the anchors docs/dra.md, docs/helm.md, docs/agent.md
// and README.md use into docs/dra.md are headings of it.
func TestDRADocsLinks(t *testing.T) {
	raw, err := os.ReadFile(draDoc)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(raw), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	for _, f := range []string{draDoc, helmDoc, "../../docs/agent.md", "../../README.md"} {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		self := f == draDoc
		pattern := `\((?:docs/)?dra\.md#([^)]+)\)`
		if self {
			pattern = `\(#([^)]+)\)`
		}
		for _, m := range regexp.MustCompile(pattern).FindAllSubmatch(text, -1) {
			if !anchors[string(m[1])] {
				t.Errorf("%s links to dra.md#%s, which is no heading of it", f, m[1])
			}
		}
		if !self && !bytes.Contains(text, []byte("dra.md")) {
			t.Errorf("%s does not link to dra.md", f)
		}
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces as
// dashes, punctuation other than dashes and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
