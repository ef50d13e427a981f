package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// caBundle returns the CA certificates of the image as one PEM file, the format Go, OpenSSL and
// curl read from /etc/ssl/certs/ca-certificates.crt.
//
// The roots are Mozilla's (the NSS trust store), as the Go team embeds them in
// golang.org/x/crypto/x509roots/fallback: a module pinned in go.sum and checked against the Go
// checksum database like any other, so the build needs no network, no distribution's package
// and no base image, and a new version of the roots is a reviewed go.mod change. The bridge
// uses them when it dials an upstream or downstream over TLS without a ca_file of its own.
//
// A root that NSS trusts only with a constraint X.509 cannot express (such as "distrust
// certificates issued after a date") is left out: written to a PEM file it would be trusted
// without its constraint.
func caBundle() ([]byte, int, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			return nil, 0, fmt.Errorf("CA bundle: a root of x509roots/fallback does not parse: %w", err)
		}
		// A line naming each root, for the person who reads the file; PEM readers skip
		// text between blocks.
		fmt.Fprintf(&buf, "# %s\n", cert.Subject)
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, 0, err
		}
		n++
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("CA bundle: x509roots/fallback holds no unconstrained root")
	}
	return buf.Bytes(), n, nil
}
