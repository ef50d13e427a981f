package main

import (
	"fmt"

	"sigs.k8s.io/yaml"

	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/mcpbridge/mcpbridge/source/csds"
)

func newStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [--addr HOST:PORT] [-o table|json|yaml] [--node ID]... [flags]",
		Short: "Show which version each connected client holds (CSDS), like istioctl proxy-status",
		Long: `Ask a bridge's Client Status Discovery Service (envoy.service.status.v3) where every
connected client stands: Envoy and gRPC over xDS, istiod and other MCP sinks, and the sinks the
bridge pushes to. The table has a row per node, and a column per type: CDS, LDS, EDS, RDS for
the Envoy types, ISTIO for every other (the Istio config collections, MeshConfig), each one of

  SYNCED    the client ACKed the bridge's current version of everything it asked for
  STALE     a newer version was sent, and the client has not answered yet
  NOT SENT  the bridge's current version of something it asked for is not sent yet
  ERROR     the client refused (NACKed) a version it was sent
  -         the node did not subscribe to the type

and VERSION, the version it last ACKed. -o json prints the whole answer as JSON instead
(protobuf's canonical JSON of ClientStatusResponse): each type, and each resource, with its
version, its state, and the client's error message for a NACK; -o yaml the same as YAML.

With authz rules, only an administrator's identity sees every node; another verified identity
sees its own nodes. Exit status: 0; 1 when the bridge cannot be reached or refuses; 2 for a bad
command line.`,
		Example: `  mcpbridge status
  mcpbridge status --addr bridge.mesh:15010 --ca-file ca.pem --cert-file oncall.pem --key-file oncall-key.pem
  mcpbridge status --node istiod-1 -o json`,
		Args: cobra.NoArgs,
		RunE: runStatus,
	}
	fs := cmd.Flags()
	addAddrFlag(fs, "address of the bridge's gRPC port")
	addOutputFlag(fs, "table", "json", "yaml")
	fs.Bool("json", false, "the old form of -o json")
	_ = fs.MarkHidden("json")
	fs.StringArray("node", nil, "only this node id (repeatable)")
	fs.Int("max-recv-msg-size", defaultWatchRecvSize, "largest answer accepted, in bytes: with --json or not, the answer lists every resource of every client (1,000 clients of 1,000 resources: about 100 MB)")
	addDialFlags(fs)
	return cmd
}

func runStatus(cmd *cobra.Command, _ []string) error {
	fs := cmd.Flags()
	format, err := outputFormat(fs, "table", "json", "yaml")
	if err != nil {
		return err
	}
	if old, _ := fs.GetBool("json"); old {
		if fs.Changed("output") {
			return usageError{fmt.Errorf("--json is the old form of -o json: give -o only")}
		}
		format = "json"
	}
	nodes, _ := fs.GetStringArray("node")
	maxRecv, _ := fs.GetInt("max-recv-msg-size")
	if maxRecv <= 0 {
		return usageError{fmt.Errorf("--max-recv-msg-size: must be a positive number of bytes, got %d", maxRecv)}
	}
	conn, err := dialFlags(fs, "addr", grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)))
	if err != nil {
		return err
	}
	defer conn.Close()
	req := &status.ClientStatusRequest{}
	for _, n := range nodes {
		req.NodeMatchers = append(req.NodeMatchers, &matcher.NodeMatcher{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: n}}})
	}
	addr, _ := fs.GetString("addr")
	resp, err := status.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(cmd.Context(), req)
	if err != nil {
		return rpcError("status: "+addr, err)
	}
	out := cmd.OutOrStdout()
	if format != "table" {
		js, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
		if err != nil {
			return err
		}
		if format == "yaml" {
			if js, err = yaml.JSONToYAML(js); err != nil {
				return err
			}
			_, err = fmt.Fprint(out, string(js))
			return err
		}
		_, err = fmt.Fprintln(out, string(js))
		return err
	}
	return csds.WriteTable(out, csds.Table(resp))
}
