package envoy

import (
	"math"
	"strconv"

	faultcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// faultConfig translates fault injection into the fault filter's per-route configuration.
// As Istio documents, a delay or abort without a percentage applies to no request. It
// reports false (the route is left out) when nothing of the fault can be translated: serving
// the route without the fault would hide the very thing the user wants to test.
func (rc *routeContext) faultConfig(vs *virtualService, field string, f *networking.HTTPFaultInjection) (*anypb.Any, bool) {
	out := &faultpb.HTTPFault{}
	if d := f.GetDelay(); d != nil {
		switch {
		case d.GetFixedDelay() != nil:
			out.Delay = &faultcommon.FaultDelay{
				FaultDelaySecifier: &faultcommon.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
				Percentage:         percentage(d.GetPercentage(), d.GetPercent()),
			}
		default:
			rc.fs.add(kindVirtualService, vs.Key, "%s.delay: only fixedDelay is translated; the delay is left out", field)
		}
	}
	if a := f.GetAbort(); a != nil {
		abort, err := faultAbort(a)
		if err != "" {
			rc.fs.add(kindVirtualService, vs.Key, "%s.abort: %s; the abort is left out", field, err)
		} else {
			out.Abort = abort
		}
	}
	if out.Delay == nil && out.Abort == nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s: nothing of the fault can be translated; the route is left out", field)
		return nil, false
	}
	cfg, err := pack(out)
	if err != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s: %v; the route is left out", field, err)
		return nil, false
	}
	return cfg, true
}

func faultAbort(a *networking.HTTPFaultInjection_Abort) (*faultpb.FaultAbort, string) {
	out := &faultpb.FaultAbort{Percentage: percentage(a.GetPercentage(), 0)}
	switch et := a.GetErrorType().(type) {
	case *networking.HTTPFaultInjection_Abort_HttpStatus:
		if et.HttpStatus < 200 || et.HttpStatus > 599 {
			return nil, "httpStatus " + strconv.Itoa(int(et.HttpStatus)) + " is not an HTTP status Envoy can send (200 to 599)"
		}
		out.ErrorType = &faultpb.FaultAbort_HttpStatus{HttpStatus: uint32(et.HttpStatus)}
	case *networking.HTTPFaultInjection_Abort_GrpcStatus:
		code, ok := grpcCode(et.GrpcStatus)
		if !ok {
			return nil, "grpcStatus " + strconv.Quote(et.GrpcStatus) + " is not a gRPC status code (such as UNAVAILABLE)"
		}
		out.ErrorType = &faultpb.FaultAbort_GrpcStatus{GrpcStatus: uint32(code)}
	default:
		return nil, "httpStatus or grpcStatus is needed (http2Error is not translated)"
	}
	return out, ""
}

// grpcCode reads a gRPC status by name ("UNAVAILABLE", as Istio asks) or by number.
func grpcCode(s string) (codes.Code, bool) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n <= 16 {
		return codes.Code(n), true
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(s))); err != nil || c > 16 {
		return 0, false
	}
	return c, true
}

// percentage translates Istio's percentage (a double, 0 to 100) or, without one, the older
// integer percent. Neither gives 0%.
func percentage(p *networking.Percent, percent int32) *typepb.FractionalPercent {
	if p != nil {
		return fractionOf(p.GetValue())
	}
	return &typepb.FractionalPercent{Numerator: uint32(min(max(percent, 0), 100)), Denominator: typepb.FractionalPercent_HUNDRED}
}

// fractionOf is a percentage in millionths, which keeps four decimals of Istio's double.
func fractionOf(pct float64) *typepb.FractionalPercent {
	pct = min(max(pct, 0), 100)
	return &typepb.FractionalPercent{Numerator: uint32(math.Round(pct * 10000)), Denominator: typepb.FractionalPercent_MILLION}
}
