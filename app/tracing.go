package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracesConfig is where OpenTelemetry traces go, from the standard OTEL_* variables (see
// Settings). Traces are on when an endpoint is set. The variables it does not hold
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE and their
// _TRACES_ forms, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*) are read by the
// OpenTelemetry SDK from the process environment.
type TracesConfig struct {
	Endpoint       string // OTEL_EXPORTER_OTLP_ENDPOINT: a base URL, /v1/traces is added for HTTP
	TracesEndpoint string // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: used as it is
	Protocol       string // OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf or grpc
	TracesProtocol string // OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: wins over Protocol
	Sampler        string // OTEL_TRACES_SAMPLER
	SamplerArg     string // OTEL_TRACES_SAMPLER_ARG
}

// On reports whether traces are to be exported.
func (c TracesConfig) On() bool { return c.Endpoint != "" || c.TracesEndpoint != "" }

// Where says where traces go, for the start-up log ("" when off). It shows the scheme,
// host and path only: a URL may hold a credential.
func (c TracesConfig) Where() string {
	if !c.On() {
		return ""
	}
	u, err := url.Parse(c.exportURL())
	if err != nil {
		return "(unparsable)"
	}
	return c.protocol() + " " + u.Scheme + "://" + u.Host + u.Path
}

func (c TracesConfig) protocol() string {
	if c.TracesProtocol != "" {
		return c.TracesProtocol
	}
	if c.Protocol != "" {
		return c.Protocol
	}
	return protoHTTP
}

// exportURL is the URL spans are sent to: the traces endpoint as it is, or the base
// endpoint with the signal's path for HTTP (gRPC ignores the path).
func (c TracesConfig) exportURL() string {
	if c.TracesEndpoint != "" {
		return c.TracesEndpoint
	}
	if c.protocol() == protoGRPC {
		return c.Endpoint
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return c.Endpoint
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String()
}

const (
	protoHTTP = "http/protobuf"
	protoGRPC = "grpc"
)

// checkOTLPProtocol checks an OTLP protocol setting.
func checkOTLPProtocol(v string) error {
	switch v {
	case protoHTTP, protoGRPC:
		return nil
	case "http/json":
		return fmt.Errorf("want http/protobuf or grpc (talkgraph's exporter does not speak http/json), got %q", v)
	}
	return fmt.Errorf("want http/protobuf or grpc, got %q", v)
}

// checkOTLPEndpoint checks an OTLP endpoint setting: an http(s) URL.
func checkOTLPEndpoint(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want a URL like http://localhost:4318 (http for plain text, https for TLS), got %q", v)
	}
	return nil
}

// samplers are the values of OTEL_TRACES_SAMPLER talkgraph takes.
var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func checkSampler(v string) error {
	for _, s := range samplers {
		if v == s {
			return nil
		}
	}
	return fmt.Errorf("want %s or %s, got %q", strings.Join(samplers[:len(samplers)-1], ", "), samplers[len(samplers)-1], v)
}

func checkSamplerArg(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("want a ratio from 0 to 1 like 0.25, got %q", v)
	}
	return nil
}

// sampler is the sampler the settings name (the SDK's default when none).
func (c TracesConfig) sampler() sdktrace.Sampler {
	ratio := 1.0
	if c.SamplerArg != "" {
		ratio, _ = strconv.ParseFloat(c.SamplerArg, 64) // checked when loaded
	}
	switch c.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// openTracing makes the TracerProvider the settings ask for: none when no endpoint is set
// (nil: nothing is traced, at no cost), else one that exports in batches over OTLP. It
// does not connect: a collector out of reach costs only the spans, and the SDK's complaints
// go to the log.
func openTracing(ctx context.Context, c TracesConfig, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !c.On() {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if c.protocol() == protoGRPC {
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(c.exportURL()))
	} else {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.exportURL()))
	}
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	b := Build()
	// talkgraph's name and version, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
	// say otherwise (the detectors that come later win).
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "talkgraph"), attribute.String("service.version", b.Version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		log.Warn("traces: some resource attributes are missing", "err", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("traces", "err", err) }))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(c.sampler())), nil
}

// tracing returns what the service and the HTTP layer trace with: the embedder's provider
// (Config.TracerProvider), else the one the settings ask for (also returned as own, for
// the App to shut down), else nil.
func tracing(ctx context.Context, cfg Config, log *slog.Logger) (tp trace.TracerProvider, own *sdktrace.TracerProvider, err error) {
	if cfg.TracerProvider != nil {
		return cfg.TracerProvider, nil, nil
	}
	own, err = openTracing(ctx, cfg.Traces, log)
	if own == nil || err != nil {
		return nil, nil, err
	}
	return own, own, nil
}
