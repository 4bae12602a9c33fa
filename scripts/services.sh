#!/usr/bin/env bash
# Starts the services the tests need when they are not running: PostgreSQL
# (127.0.0.1:5432, database "test") and Redis (127.0.0.1:6379). The machines
# idem is developed and tested on start both before a session; this script
# makes a fresh or rebooted machine equal to that.
set -euo pipefail

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! pg_up; then
  if ! command -v pg_ctlcluster >/dev/null; then
    echo "services: PostgreSQL is not installed; installing" >&2
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  fi
  echo "services: starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
pg_up || { echo "services: PostgreSQL did not start" >&2; exit 1; }
if ! psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='test'" 2>/dev/null | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -c "create database test" >/dev/null
fi

if ! redis_up; then
  if ! command -v redis-server >/dev/null; then
    echo "services: Redis is not installed; installing" >&2
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  fi
  echo "services: starting Redis" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi
redis_up || { echo "services: Redis did not start" >&2; exit 1; }
echo "services: PostgreSQL and Redis are up" >&2
