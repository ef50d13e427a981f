package csds

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/mcpbridge/mcpbridge/translate"
)

// Columns are the table's state columns, as istioctl proxy-status has them: the Envoy types,
// then ISTIO for every other type (the Istio config collections, MeshConfig, MCP), the worst
// of them.
var Columns = []string{"CDS", "LDS", "EDS", "RDS", "ISTIO"}

// Row is one node of the table.
type Row struct {
	Node string `json:"node"`
	// States are by column: SYNCED, STALE, NOT SENT, ERROR; a column the node did not
	// subscribe to is absent.
	States map[string]string `json:"states"`
	// Version is the version the node last ACKed, of any type.
	Version string `json:"version"`
}

// column is the table column of a type.
func column(typeURL string) string {
	switch typeURL {
	case translate.EnvoyClusterType:
		return "CDS"
	case translate.EnvoyListenerType:
		return "LDS"
	case translate.EnvoyEndpointType:
		return "EDS"
	case translate.EnvoyRouteType:
		return "RDS"
	}
	return "ISTIO"
}

// Table reads the type entries (empty names) of a CSDS response into rows, one per
// ClientConfig, in its order.
func Table(resp *status.ClientStatusResponse) []Row {
	rows := make([]Row, 0, len(resp.GetConfig()))
	for _, cc := range resp.GetConfig() {
		row := Row{Node: cc.GetNode().GetId(), States: map[string]string{}}
		worst := map[string]status.ConfigStatus{}
		var latest int64 = -1
		for _, g := range cc.GetGenericXdsConfigs() {
			if g.GetName() != "" {
				continue
			}
			col := column(g.GetTypeUrl())
			if cur, ok := worst[col]; !ok || rank(g.GetConfigStatus()) > rank(cur) {
				worst[col] = g.GetConfigStatus()
			}
			// The version of the latest ACK: a SYNCED type's version_info is the version
			// the client ACKed, and last_updated when. (An ERROR type's version_info is also
			// ACKed, but its time is the NACK's: it counts only when no type is SYNCED.)
			switch t := g.GetLastUpdated().AsTime().UnixNano(); {
			case g.GetVersionInfo() == "" || g.GetLastUpdated() == nil:
			case g.GetConfigStatus() == status.ConfigStatus_SYNCED && t > latest:
				latest, row.Version = t, g.GetVersionInfo()
			case g.GetConfigStatus() == status.ConfigStatus_ERROR && latest < 0 && row.Version == "":
				row.Version = g.GetVersionInfo()
			}
		}
		for col, s := range worst {
			row.States[col] = stateText(s)
		}
		rows = append(rows, row)
	}
	return rows
}

// rank orders states for a column's summary: the worst wins.
func rank(s status.ConfigStatus) int {
	switch s {
	case status.ConfigStatus_SYNCED:
		return 1
	case status.ConfigStatus_NOT_SENT:
		return 2
	case status.ConfigStatus_STALE:
		return 3
	case status.ConfigStatus_ERROR:
		return 4
	}
	return 0
}

// stateText is a state as istioctl prints it.
func stateText(s status.ConfigStatus) string {
	if s == status.ConfigStatus_NOT_SENT {
		return "NOT SENT"
	}
	return s.String()
}

// WriteTable prints rows as aligned columns: NAME, the state columns, VERSION. A node that
// named no id shows as "-"; a type not subscribed, as "-".
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\t"+strings.Join(Columns, "\t")+"\tVERSION")
	for _, r := range rows {
		cells := []string{orDash(r.Node)}
		for _, c := range Columns {
			cells = append(cells, orDash(r.States[c]))
		}
		cells = append(cells, orDash(r.Version))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
