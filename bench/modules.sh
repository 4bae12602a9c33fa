#!/usr/bin/env bash
# What a user who imports idemhttp and the PostgreSQL store pulls into
# their module, today and with the heavy drivers (DynamoDB, S3, Pebble,
# NATS, AMQP, the OpenTelemetry exporters) in modules of their own:
# go.mod requirements, go.sum lines, the module graph, the packages built,
# and a cold build (fresh GOCACHE, twice). The split is simulated on a copy
# of HEAD: the drivers and the gateway (which needs them all) are deleted,
# with every file that imports them or their SDKs directly (the tests that
# would move with them), and go mod tidy prunes the copy's go.mod.
# docs/bench/MODULES.md has the figures and the decision.
#
#   bench/modules.sh      # a few minutes; no network (the module cache serves)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT

# user DIR IDEM: a module that serves idemhttp over the PostgreSQL store,
# with github.com/idem-dev/idem replaced by IDEM.
user() {
	mkdir -p "$1"
	cat >"$1/main.go" <<'GO'
package main

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/postgres"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	st, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	eng := idem.New(st, idem.Policy{})
	log.Fatal(http.ListenAndServe(":8080", idemhttp.Middleware(eng, idemhttp.Options{})(http.NotFoundHandler())))
}
GO
	printf 'module example.com/payments\n\ngo 1.26.8\n\nrequire github.com/idem-dev/idem v0.0.0\n\nreplace github.com/idem-dev/idem => %s\n' "$2" >"$1/go.mod"
	(cd "$1" && go mod tidy)
}

# measure NAME DIR
measure() {
	cd "$2"
	echo "## $1"
	echo "go.mod requirements: $(awk '/^require \(/{f=1; next} f && /^\)/{f=0} f{n++} /^require [^(]/{n++} END{print n}' go.mod)"
	echo "go.sum lines: $(wc -l <go.sum)"
	echo "go list -m all: $(go list -m all | wc -l) modules"
	echo "packages built outside the standard library: $(go list -deps . | grep -c '\.')"
	for i in 1 2; do
		c=$(mktemp -d "$tmp/gocache.XXXX")
		s=$(date +%s%N)
		GOCACHE=$c go build -o /dev/null .
		echo "cold build $i (fresh GOCACHE): $(awk -v ns=$(( $(date +%s%N) - s )) 'BEGIN{printf "%.1f", ns/1e9}') s"
		rm -rf "$c"
	done
	cd - >/dev/null
}

user "$tmp/today" "$root"
measure "today" "$tmp/today"

split=$tmp/split-src
mkdir -p "$split"
(cd "$root" && git archive HEAD) | tar -x -C "$split"
cd "$split"
rm -rf store/dynamodb store/s3 store/pebble trigger/nats trigger/amqp cmd internal/gateway deploy \
	bench rpc examples/routers trigger/temporal internal/tools
heavy='"(github.com/idem-dev/idem/(store/(dynamodb|s3|pebble)|trigger/(nats|amqp)|cmd/|internal/gateway)|github.com/aws/|github.com/cockroachdb/pebble|github.com/nats-io/|github.com/rabbitmq/|go.opentelemetry.io/otel/exporters/)'
while files=$(grep -rlE "$heavy" --include='*.go' . || true); [ -n "$files" ]; do
	echo "split: deleted $(echo $files)" >&2
	rm $files
	# A package whose every non-test file went goes too: its importers' files follow.
	gone=$(for f in $files; do d=$(dirname "${f#./}"); ls "$d"/*.go 2>/dev/null | grep -qv '_test.go$' || echo "$d"; done | sort -u)
	for d in $gone; do heavy="${heavy%)}|github.com/idem-dev/idem/$d\")"; done
done
go mod tidy
cd - >/dev/null
user "$tmp/split" "$split"
measure "drivers in modules of their own" "$tmp/split"
