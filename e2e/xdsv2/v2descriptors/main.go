// Command v2descriptors writes the descriptors of Envoy's v2 resource messages (Cluster,
// ClusterLoadAssignment, Listener, RouteConfiguration and everything they reach), as
// go-control-plane v0.9 compiled them, to a google.protobuf.FileDescriptorSet. The main
// module's test of the v2 transport (translate/envoy, TestV3BodiesReadAsV2) reads the
// translation's v3 bodies with them; the main module cannot import the v2 packages (they
// are gone from the go-control-plane it uses, and conflict with its envoy submodule).
//
//	go run ./v2descriptors -o ../../translate/envoy/testdata/envoy-api-v2.binpb
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	apiv2 "github.com/envoyproxy/go-control-plane/envoy/api/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	out := flag.String("o", "envoy-api-v2.binpb", "output file")
	flag.Parse()
	files := map[string]protoreflect.FileDescriptor{}
	for _, m := range []proto.Message{&apiv2.Cluster{}, &apiv2.ClusterLoadAssignment{}, &apiv2.Listener{}, &apiv2.RouteConfiguration{}} {
		collect(m.ProtoReflect().Descriptor().ParentFile(), files)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names) // a stable file for a stable input
	set := &descriptorpb.FileDescriptorSet{}
	for _, n := range names {
		fd := protodesc.ToFileDescriptorProto(files[n])
		fd.SourceCodeInfo = nil
		set.File = append(set.File, fd)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d files, %d bytes\n", len(set.File), len(b))
}

// collect adds a file and its imports, transitively.
func collect(fd protoreflect.FileDescriptor, files map[string]protoreflect.FileDescriptor) {
	if _, ok := files[fd.Path()]; ok {
		return
	}
	files[fd.Path()] = fd
	imports := fd.Imports()
	for i := range imports.Len() {
		collect(imports.Get(i).FileDescriptor, files)
	}
}
