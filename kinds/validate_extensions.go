package kinds

import (
	"errors"
	"fmt"
	"net/url"

	extensions "istio.io/api/extensions/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// validateProxyConfig mirrors Istio's ValidateProxyConfig.
func validateProxyConfig(v *validator, pc *networkingv1beta1.ProxyConfig) {
	sp := specRoot.f("selector")
	v.workloadSelectorAt(&sp, pc.Selector)
	if pc.Concurrency.GetValue() < 0 {
		cp := specRoot.f("concurrency")
		v.errorf(&cp, "concurrency must be greater than or equal to 0")
	}
}

// validateTelemetry mirrors Istio's ValidateTelemetry. Istio also parses each access log
// filter as CEL, with a parser the bridge does not link: a filter that is not CEL is left to
// istiod.
func validateTelemetry(v *validator, t *telemetry.Telemetry) {
	v.policySelectionAt(t.GetSelector(), t.GetTargetRef(), t.GetTargetRefs())

	metrics := specRoot.f("metrics")
	for i, m := range t.Metrics {
		if m == nil {
			continue
		}
		mp := metrics.i(i)
		pp := mp.f("providers")
		v.providersAt(&pp, m.Providers)
		op := mp.f("overrides")
		for j, o := range m.Overrides {
			jp := op.i(j)
			if o == nil {
				v.errorf(&jp, "tagOverrides may not be null")
				continue
			}
			tp := jp.f("tagOverrides")
			for name, to := range o.TagOverrides {
				kp := tp.k(name)
				if to == nil {
					v.errorf(&kp, "tagOverrides may not be null")
					continue
				}
				switch to.Operation {
				case telemetry.MetricsOverrides_TagOverride_UPSERT:
					if to.Value == "" {
						v.errorf(&kp, "tagOverrides.value must be set when operation is UPSERT")
					}
				case telemetry.MetricsOverrides_TagOverride_REMOVE:
					if to.Value != "" {
						v.errorf(&kp, "tagOverrides.value may only be set when operation is UPSERT")
					}
				}
			}
			if cm, ok := o.GetMatch().GetMetricMatch().(*telemetry.MetricSelector_CustomMetric); ok && cm.CustomMetric == "" {
				matchp := jp.f("match")
				cp := matchp.f("customMetric")
				v.errorf(&cp, "customMetric may not be empty")
			}
		}
	}

	tracing := specRoot.f("tracing")
	for i, tr := range t.Tracing {
		if tr == nil {
			continue
		}
		ip := tracing.i(i)
		pp := ip.f("providers")
		v.providersAt(&pp, tr.Providers)
		if s := tr.RandomSamplingPercentage.GetValue(); s < 0 || s > 100 {
			sp := ip.f("randomSamplingPercentage")
			v.errorf(&sp, "randomSamplingPercentage must be in range [0.0, 100.0]")
		}
		tp := ip.f("customTags")
		for name, tag := range tr.CustomTags {
			kp := tp.k(name)
			if name == "" {
				v.errorf(&kp, "tag name may not be empty")
			}
			if tag == nil {
				v.errorf(&kp, "tag '%s' may not have a nil value", name)
				continue
			}
			switch ty := tag.Type.(type) {
			case *telemetry.Tracing_CustomTag_Literal:
				if ty.Literal.GetValue() == "" {
					v.errorf(&kp, "literal tag value may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Header:
				if ty.Header.GetName() == "" {
					v.errorf(&kp, "header tag name may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Environment:
				if ty.Environment.GetName() == "" {
					v.errorf(&kp, "environment tag name may not be empty")
				}
			}
		}
	}

	logging := specRoot.f("accessLogging")
	for i, l := range t.AccessLogging {
		if l == nil {
			continue
		}
		ip := logging.i(i)
		pp := ip.f("providers")
		v.providersAt(&pp, l.Providers)
	}
}

// providersAt mirrors validateTelemetryProviders.
func (v *validator) providersAt(p *path, providers []*telemetry.ProviderRef) {
	for i, pr := range providers {
		if pr.GetName() == "" {
			ip := p.i(i)
			np := ip.f("name")
			v.errorf(&np, "providers.name may not be empty")
			return
		}
	}
}

// validateWasmPlugin mirrors Istio's ValidateWasmPlugin.
func validateWasmPlugin(v *validator, w *extensions.WasmPlugin) {
	v.policySelectionAt(w.GetSelector(), w.GetTargetRef(), w.GetTargetRefs())
	v.wasmCodeAt(&specRoot, w.Url, w.Sha256, w.ImagePullSecret, w.PluginName, w.VmConfig, "255")
	trafficMatchAt(v, w.Match)
}

// validateTrafficExtension mirrors Istio's ValidateTrafficExtension: exactly one of a Wasm
// module and Lua code.
func validateTrafficExtension(v *validator, t *extensions.TrafficExtension) {
	wasm, lua := t.GetWasm(), t.GetLua()
	if (wasm != nil) == (lua != nil) {
		v.errorf(&specRoot, "exactly one of wasm or lua must be set")
	}
	v.policySelectionAt(t.GetSelector(), nil, t.GetTargetRefs())
	if lua != nil {
		lp := specRoot.f("lua")
		cp := lp.f("inlineCode")
		switch n := len(lua.InlineCode); {
		case n == 0:
			v.errorf(&cp, "lua.inlineCode cannot be empty")
		case n > 65536:
			v.errorf(&cp, "lua.inlineCode exceeds maximum size of 64KB")
		}
	}
	if wasm != nil {
		wp := specRoot.f("wasm")
		v.wasmCodeAt(&wp, wasm.Url, wasm.Sha256, wasm.ImagePullSecret, wasm.PluginName, wasm.VmConfig, "256")
	}
	trafficMatchAt(v, t.Match)
}

// wasmCodeAt checks where a Wasm module comes from and how it runs, as ValidateWasmPlugin
// (validateWasmPluginURL, SHA, ImagePullSecret, Name, VMConfig) and ValidateTrafficExtension
// do. nameLimit is the bound their messages give for a plugin name (WasmPlugin's says 255,
// TrafficExtension's 256; both refuse more than 256 characters).
func (v *validator) wasmCodeAt(p *path, rawURL, sha256, pullSecret, pluginName string, vm *extensions.VmConfig, nameLimit string) {
	up := p.f("url")
	v.add(&up, validateWasmPluginURL(rawURL))
	if sha256 != "" {
		sp := p.f("sha256")
		if len(sha256) != 64 {
			v.errorf(&sp, "sha256 field must be 64 characters long")
		} else {
			for i := 0; i < len(sha256); i++ {
				if c := sha256[i]; !(c >= 'a' && c <= 'f' || isDigit(c)) {
					v.errorf(&sp, "sha256 field must match [a-f0-9]{64} pattern")
					break
				}
			}
		}
	}
	if len(pullSecret) > 253 {
		sp := p.f("imagePullSecret")
		v.errorf(&sp, "imagePullSecret field must be less than 253 characters long")
	}
	if len(pluginName) > 256 {
		np := p.f("pluginName")
		v.errorf(&np, "pluginName field must be less than %s characters long", nameLimit)
	}
	vp := p.f("vmConfig")
	ep := vp.f("env")
	seen := map[string]bool{}
	for i, env := range vm.GetEnv() {
		if env == nil {
			continue
		}
		ip := ep.i(i)
		var err error
		switch {
		case env.Name == "":
			err = errors.New("spec.vmConfig.env invalid")
		case len(env.Name) > 256:
			err = errors.New("env.name field must be less than 255 characters long")
		case seen[env.Name]:
			err = errors.New("duplicate env")
		case env.ValueFrom != extensions.EnvValueSource_INLINE && env.Value != "":
			err = errors.New("value may only be set when valueFrom is INLINE")
		}
		if err != nil {
			v.add(&ip, err) // Istio stops at the first bad variable
			return
		}
		seen[env.Name] = true
	}
}

// validateWasmPluginURL mirrors validateWasmPluginURL and strictParseURL: a URL, or a host and
// path without scheme, of scheme file, http, https or oci.
func validateWasmPluginURL(raw string) error {
	if raw == "" {
		return errors.New("url field needs to be set")
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		nu, nerr := url.ParseRequestURI("http://" + raw)
		if nerr != nil {
			return fmt.Errorf("failed to parse url: %s", err)
		}
		if _, err := url.Parse("http://" + raw); err != nil {
			return fmt.Errorf("failed to strict parse url: %s", err)
		}
		u = nu
	} else if _, err := url.Parse(raw); err != nil {
		return fmt.Errorf("failed to strict parse url: %s", err)
	}
	switch u.Scheme {
	case "", "file", "http", "https", "oci":
		return nil
	}
	return fmt.Errorf("url contains unsupported scheme: %s", u.Scheme)
}

// trafficMatchAt checks the traffic selectors of a WasmPlugin or a TrafficExtension as
// validateWasmPluginMatch and validateTrafficExtensionMatch do: each is set, and its ports are
// in range. Like them, it stops at the first fault.
func trafficMatchAt[S interface {
	comparable
	GetPorts() []*typev1beta1.PortSelector
}](v *validator, selectors []S) {
	mp := specRoot.f("match")
	var none S
	for i, sel := range selectors {
		ip := mp.i(i)
		if sel == none {
			v.errorf(&ip, "spec.Match[%d] is nil", i)
			return
		}
		pp := ip.f("ports")
		for j, port := range sel.GetPorts() {
			jp := pp.i(j)
			if port == nil {
				v.errorf(&jp, "spec.Match[%d].Ports[%d] is nil", i, j)
				return
			}
			if n := port.GetNumber(); n == 0 || n > 65535 {
				np := jp.f("number")
				v.errorf(&np, "spec.Match[%d].Ports[%d] is out of range: %d", i, j, n)
				return
			}
		}
	}
}
