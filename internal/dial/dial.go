// Package dial builds the gRPC client connections the bridge opens itself (to upstream
// ResourceSources and downstream ResourceSinks), and the reconnect backoff they share.
package dial

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/wire"
)

// TLS configures a TLS dial. With no CAFile the system roots verify the server.
type TLS struct {
	CAFile     string `mapstructure:"ca_file"`
	CertFile   string `mapstructure:"cert_file"` // client certificate, for mutual TLS
	KeyFile    string `mapstructure:"key_file"`
	ServerName string `mapstructure:"server_name"` // overrides the name checked in the server's certificate
}

// Target is one remote endpoint the bridge dials.
type Target struct {
	Address string `mapstructure:"address"`
	// TLS, when set, secures the connection; otherwise it is plaintext.
	TLS *TLS `mapstructure:"tls"`
	// KeepaliveTime pings an idle connection this often (0: gRPC's default, none).
	KeepaliveTime time.Duration `mapstructure:"keepalive_time"`
	// KeepaliveTimeout closes the connection when a ping is not answered in time.
	KeepaliveTimeout time.Duration `mapstructure:"keepalive_timeout"`
	// Authz, for an upstream, is what it may produce: what it sends outside is refused
	// (PermissionDenied) and nothing of that message applied. Nil: everything. Not for
	// downstreams.
	Authz *authz.Scope `mapstructure:"authz"`
}

// Options returns the dial options for a target. Every connection uses wire.Codec so that
// pre-encoded frames pass through unchanged.
func Options(t Target) ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{}))}
	if t.TLS == nil {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		cfg, err := tlsConfig(t.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if t.KeepaliveTime > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: t.KeepaliveTime, Timeout: t.KeepaliveTimeout, PermitWithoutStream: true,
		}))
	}
	return opts, nil
}

func tlsConfig(c *TLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file %s: no PEM certificate in it", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("tls.cert_file and tls.key_file go together: set both or neither")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Backoff is exponential reconnect backoff with jitter, so that many bridges (or many
// targets) that lost their peer together do not come back in lockstep.
type Backoff struct {
	Base, Max time.Duration
	attempt   int
}

// Next returns how long to wait before the next attempt.
func (b *Backoff) Next() time.Duration {
	base, max := b.Base, b.Max
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	d := base << min(b.attempt, 20)
	if d > max || d <= 0 {
		d = max
	}
	b.attempt++
	// ±20% jitter
	jitter := time.Duration(rand.Int64N(int64(d)/5*2+1)) - d/5
	return d + jitter
}

// Reset starts the sequence over, after a connection that worked.
func (b *Backoff) Reset() { b.attempt = 0 }
