module github.com/idem-dev/idem/trigger/temporal

go 1.26.8

require github.com/idem-dev/idem v0.0.0

require go.temporal.io/sdk v1.51.0 // indirect

replace github.com/idem-dev/idem => ../..
