package httpapi

import (
	"context"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/talkgraph/talkgraph/httpapi/graphqlws"
	"github.com/talkgraph/talkgraph/service"
)

// metrics exposes the service's counters and the operations' latency to Prometheus.
type metrics struct {
	svc     *service.Service
	ws      *graphqlws.Transport
	latency *prometheus.HistogramVec

	runs    *prometheus.Desc
	subs    *prometheus.Desc
	chunks  *prometheus.Desc
	busy    *prometheus.Desc
	waiting *prometheus.Desc
	sockets *prometheus.Desc
	rounds  *prometheus.Desc
	batches *prometheus.Desc
	failed  *prometheus.Desc
	inStore *prometheus.Desc
	usage   *prometheus.Desc
	owned   *prometheus.Desc
	taken   *prometheus.Desc
	broker  *prometheus.Desc
	dropped *prometheus.Desc
	queued  *prometheus.Desc
}

func newMetrics(svc *service.Service, ws *graphqlws.Transport) *metrics {
	return &metrics{
		svc: svc, ws: ws,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "talkgraph_operation_duration_seconds", Help: "Time to answer GraphQL queries and mutations, by operation type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"type"}),
		runs:    prometheus.NewDesc("talkgraph_runs_finished_total", "Runs that ended, by final status.", []string{"status"}, nil),
		subs:    prometheus.NewDesc("talkgraph_subscriptions_active", "Open messageStream subscriptions.", nil, nil),
		chunks:  prometheus.NewDesc("talkgraph_chunks_streamed_total", "Chunk events appended to session logs.", nil, nil),
		busy:    prometheus.NewDesc("talkgraph_runs_executing", "Runs holding a worker slot.", nil, nil),
		waiting: prometheus.NewDesc("talkgraph_runs_waiting_for_slot", "Runs waiting for a worker slot.", nil, nil),
		sockets: prometheus.NewDesc("talkgraph_websockets_open", "Open websocket connections.", nil, nil),
		rounds:  prometheus.NewDesc("talkgraph_writer_rounds_total", "Transactions the writer made, each with every write waiting.", nil, nil),
		batches: prometheus.NewDesc("talkgraph_writer_batches_total", "Sessions' batches written (a round writes many).", nil, nil),
		failed:  prometheus.NewDesc("talkgraph_writer_failed_batches_total", "Batches the store refused or could not write.", nil, nil),
		inStore: prometheus.NewDesc("talkgraph_writer_busy_seconds_total", "Time the writer spent in the store.", nil, nil),
		queued:  prometheus.NewDesc("talkgraph_writer_commands_waiting", "Commands waiting for a round of the writer.", nil, nil),
		owned:   prometheus.NewDesc("talkgraph_runs_owned", "Runs this replica runs (queued and waiting included).", nil, nil),
		taken:   prometheus.NewDesc("talkgraph_runs_taken_over_total", "Runs this replica took over from replicas that were gone.", nil, nil),
		broker:  prometheus.NewDesc("talkgraph_broker_reconnects_total", "Times the connection to NATS came back after a loss.", nil, nil),
		dropped: prometheus.NewDesc("talkgraph_bus_dropped_total", "Messages from NATS dropped unread, by reason: unopenable (not sealed with this deployment's bus key, or altered), stale, replayed.", []string{"reason"}, nil),
		usage:   prometheus.NewDesc("talkgraph_model_tokens_total", "Tokens agents reported, by model and kind (input, output, cached_input).", []string{"model", "kind"}, nil),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	for _, d := range []*prometheus.Desc{m.runs, m.subs, m.chunks, m.busy, m.waiting, m.sockets, m.rounds, m.batches, m.failed, m.inStore, m.queued, m.usage, m.owned, m.taken, m.broker, m.dropped} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	st := m.svc.Stats()
	for _, s := range []service.RunStatus{service.RunCompleted, service.RunCancelled, service.RunInterrupted, service.RunFailed} {
		ch <- prometheus.MustNewConstMetric(m.runs, prometheus.CounterValue, float64(st.RunsFinished[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(m.subs, prometheus.GaugeValue, float64(st.Subscriptions))
	ch <- prometheus.MustNewConstMetric(m.chunks, prometheus.CounterValue, float64(st.ChunksStreamed))
	ch <- prometheus.MustNewConstMetric(m.busy, prometheus.GaugeValue, float64(st.RunsBusy))
	ch <- prometheus.MustNewConstMetric(m.waiting, prometheus.GaugeValue, float64(st.RunsWaiting))
	ch <- prometheus.MustNewConstMetric(m.sockets, prometheus.GaugeValue, float64(m.ws.Count()))
	ch <- prometheus.MustNewConstMetric(m.rounds, prometheus.CounterValue, float64(st.Writes.Rounds))
	ch <- prometheus.MustNewConstMetric(m.batches, prometheus.CounterValue, float64(st.Writes.Batches))
	ch <- prometheus.MustNewConstMetric(m.failed, prometheus.CounterValue, float64(st.Writes.Failed))
	ch <- prometheus.MustNewConstMetric(m.inStore, prometheus.CounterValue, st.Writes.Busy.Seconds())
	ch <- prometheus.MustNewConstMetric(m.queued, prometheus.GaugeValue, float64(st.Writes.Waiting))
	ch <- prometheus.MustNewConstMetric(m.owned, prometheus.GaugeValue, float64(st.RunsOwned))
	ch <- prometheus.MustNewConstMetric(m.taken, prometheus.CounterValue, float64(st.Takeovers))
	ch <- prometheus.MustNewConstMetric(m.broker, prometheus.CounterValue, float64(st.BrokerReconnects))
	for reason, n := range st.BusDropped {
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(n), reason)
	}
	for model, u := range st.Usage {
		ch <- prometheus.MustNewConstMetric(m.usage, prometheus.CounterValue, float64(u.InputTokens), model, "input")
		ch <- prometheus.MustNewConstMetric(m.usage, prometheus.CounterValue, float64(u.OutputTokens), model, "output")
		if u.CachedInputTokens != nil {
			ch <- prometheus.MustNewConstMetric(m.usage, prometheus.CounterValue, float64(*u.CachedInputTokens), model, "cached_input")
		}
	}
}

// aroundOperations records the latency of queries and mutations (subscriptions last as
// long as the client wants, so they are not timed).
func (m *metrics) aroundOperations(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	rc := graphql.GetOperationContext(ctx)
	if rc.Operation == nil || rc.Operation.Operation == "subscription" {
		return next(ctx)
	}
	start := time.Now()
	h := next(ctx)
	return func(ctx context.Context) *graphql.Response {
		resp := h(ctx)
		m.latency.WithLabelValues(string(rc.Operation.Operation)).Observe(time.Since(start).Seconds())
		return resp
	}
}
