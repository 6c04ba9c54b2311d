// Package gathered reads series as a prometheus.Gatherer returns them
// (client_model's dto): the status page, the experiment's report, the
// bench and the tests read the exporter's own registry this way.
package gathered

import (
	"math"

	dto "github.com/prometheus/client_model/go"
)

// Value is a gauge's or counter's value; NaN for any other type.
func Value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}

// Label is the value of m's label name; "" when it has none.
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
