// Package deploy holds what it takes to run the idem gateway in
// production, and the tests that check it with the tools of each field:
//
//	systemd/idem.service           a hardened unit (systemd-analyze verify)
//	systemd/idem.yaml              its configuration
//	Containerfile                  a multi-stage image: static binary, non-root, distroless
//	kubernetes/sidecar.yaml        the gateway as a sidecar of the API's pods
//	kubernetes/gateway.yaml        the gateway as a Deployment in front of a Service
//	prometheus/alerts.yml          alert rules (promtool test rules alerts_test.yml)
//	grafana/idem-dashboard.json    a Grafana dashboard of idem's metrics
//
// It has no Go API; deploy_test.go is the point.
package deploy
