// Package translate is what the rest of the bridge knows of the translation of Istio config
// into Envoy resources: the Envoy types it derives (their type URLs are the store collections
// that hold them), the make-before-break order of those types on one stream (EnvoyOrder), and
// gateway classes, the unit in which gateway proxies' listeners and routes are built. The
// translation itself is translate/envoy (the controller that derives the resources) and
// translate/envoyv2 (their v2 spelling); the servers import this package, never those.
//
// The Istio kinds (their names across protocol generations, and istiod's validation of each)
// are package kinds.
package translate
