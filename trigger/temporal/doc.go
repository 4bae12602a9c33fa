// Package temporal runs idem's trigger IDs and schedules on Temporal.
package temporal
