package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/store/dynamostore"
)

// DynamoDB publishes a DynamoDB store's counts, one snapshot of stats per
// scrape: what decisions cost in requests and write units, and how
// contention and faults were met. requests, if not nil, returns every
// request sent to DynamoDB, by operation.
func DynamoDB(stats func() dynamostore.StatsSnapshot, requests func() map[string]int64) prometheus.Collector {
	return dynamoCollector{stats, requests}
}

type dynamoCollector struct {
	stats    func() dynamostore.StatsSnapshot
	requests func() map[string]int64 // every request to DynamoDB, by operation
}

var dynamoRequests = prometheus.NewDesc("sluice_dynamodb_requests_total", "Requests sent to DynamoDB by any part of the node (counters, tenants, sessions, registrations), every try included, by operation.", []string{"operation"}, nil)

var dynamoMetrics = []struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(dynamostore.StatsSnapshot) int64
}{
	{prometheus.NewDesc("sluice_dynamodb_reads_total", "Consistent reads of counters.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.Reads }},
	{prometheus.NewDesc("sluice_dynamodb_writes_total", "Conditional single-item writes of counters.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.Writes }},
	{prometheus.NewDesc("sluice_dynamodb_transactions_total", "Multi-item transactions of counters.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.Transactions }},
	{prometheus.NewDesc("sluice_dynamodb_write_units_total", "Estimated write capacity units consumed by counters.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.WriteUnits }},
	{prometheus.NewDesc("sluice_dynamodb_conflicts_total", "Conditional writes lost to another writer.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.Conflicts }},
	{prometheus.NewDesc("sluice_dynamodb_local_denials_total", "Denials answered from remembered state, without a request.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.LocalDenials }},
	{prometheus.NewDesc("sluice_dynamodb_leased_local_total", "Decisions admitted from a leased batch, locally.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.LeasedLocal }},
	{prometheus.NewDesc("sluice_dynamodb_write_attempts_total", "Write requests of decisions, every try included.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.WriteAttempts }},
	{prometheus.NewDesc("sluice_dynamodb_write_attempts_max", "The most write requests any one decision made.", nil, nil), prometheus.GaugeValue, func(s dynamostore.StatsSnapshot) int64 { return s.MostAttempts }},
	{prometheus.NewDesc("sluice_dynamodb_retries_total", "Write requests sent again after a throttle, a conflict or a lost answer.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.Retries }},
	{prometheus.NewDesc("sluice_dynamodb_gave_up_total", "Decisions failed for want of attempts or of time (the fail modes decided).", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.GaveUp }},
	{prometheus.NewDesc("sluice_dynamodb_empty_failures_total", "Failed conditions that returned no item, each answered by a read.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.EmptyFailures }},
	{prometheus.NewDesc("sluice_dynamodb_lock_timeouts_total", "Decisions whose deadline passed waiting for this node's others on the same key.", nil, nil), prometheus.CounterValue, func(s dynamostore.StatsSnapshot) int64 { return s.LockTimeouts }},
}

// Describe implements prometheus.Collector.
func (c dynamoCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range dynamoMetrics {
		ch <- m.desc
	}
	ch <- dynamoRequests
}

// Collect implements prometheus.Collector: one snapshot per scrape.
func (c dynamoCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range dynamoMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(m.value(s)))
	}
	if c.requests != nil {
		for op, n := range c.requests() {
			ch <- prometheus.MustNewConstMetric(dynamoRequests, prometheus.CounterValue, float64(n), op)
		}
	}
}
