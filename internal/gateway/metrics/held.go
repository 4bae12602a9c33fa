package metrics

import "github.com/prometheus/client_golang/prometheus"

// KeysInProgress exports n() as idem_keys_in_progress: the keys this
// process holds right now (reserved, not yet completed or released). A
// number that grows and stays up means upstream calls that do not return.
func (m *Metrics) KeysInProgress(n func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "idem",
		Name:      "keys_in_progress",
		Help:      "Keys this gateway holds right now: reserved, not yet completed or released.",
	}, func() float64 { return float64(n()) }))
}
