package tlsserver

import (
	"crypto/tls"
	"fmt"
)

// Config is one listener's TLS: the server's certificate and key, and the CAs that verify
// client certificates. The keys are the mapstructure tags under the listener's key
// ("grpc.tls.cert_file").
type Config struct {
	// CertFile and KeyFile are the server's certificate (PEM, the leaf first, then its
	// intermediates) and private key. With both set the listener serves TLS; with neither,
	// plaintext.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// ClientCAFile holds the CAs (PEM) client certificates are verified against.
	ClientCAFile string `mapstructure:"client_ca_file"`
	// ClientAuth is none, request (verify a client certificate if one is given) or require
	// (refuse a handshake without a valid one). Empty: require with a ClientCAFile, else none.
	ClientAuth string `mapstructure:"client_auth"`
}

// The values of client_auth.
const (
	ClientAuthNone    = "none"
	ClientAuthRequest = "request"
	ClientAuthRequire = "require"
)

// Enabled reports whether the listener serves TLS.
func (c Config) Enabled() bool { return c.CertFile != "" }

// Validate checks that the keys go together; it does not read the files (New does). key is
// where the settings are in the configuration ("grpc.tls"): the error names the offending key.
func (c Config) Validate(key string) error {
	if _, err := c.clientAuthType(key); err != nil {
		return err
	}
	switch {
	case c.KeyFile != "" && c.CertFile == "":
		return fmt.Errorf("%s.key_file: set without %s.cert_file; set both, or neither for plaintext", key, key)
	case c.CertFile != "" && c.KeyFile == "":
		return fmt.Errorf("%s.cert_file: set without %s.key_file; set both, or neither for plaintext", key, key)
	case c.ClientCAFile != "" && c.CertFile == "":
		return fmt.Errorf("%s.client_ca_file: client certificates are verified only over TLS: set %s.cert_file and %s.key_file too", key, key, key)
	}
	auth := c.clientAuth()
	if auth == ClientAuthNone {
		return nil
	}
	if c.CertFile == "" {
		return fmt.Errorf("%s.client_auth: %s needs TLS: set %s.cert_file and %s.key_file", key, auth, key, key)
	}
	if c.ClientCAFile == "" {
		// Without CAs of its own, crypto/tls would verify client certificates against the
		// system's roots: any public CA's customer would be a client.
		return fmt.Errorf("%s.client_auth: %s needs %s.client_ca_file, the CAs client certificates are verified against", key, auth, key)
	}
	return nil
}

// clientAuth is client_auth with its default applied.
func (c Config) clientAuth() string {
	switch {
	case c.ClientAuth != "":
		return c.ClientAuth
	case c.ClientCAFile != "":
		return ClientAuthRequire
	}
	return ClientAuthNone
}

func (c Config) clientAuthType(key string) (tls.ClientAuthType, error) {
	switch c.clientAuth() {
	case ClientAuthNone:
		return tls.NoClientCert, nil
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven, nil
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("%s.client_auth: %q is not one of none, request, require", key, c.ClientAuth)
}
