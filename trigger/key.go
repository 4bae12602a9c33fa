package trigger

import (
	"strconv"
	"time"
)

// EventKey returns the ID of the run an event triggers:
// "activity-{activityID}:{eventID}". The event ID must be stable across
// redeliveries; assign one at the ingress boundary if the source has none.
func EventKey(activityID, eventID string) string {
	return "activity-" + activityID + ":" + eventID
}

// SlotKey returns the ID of the run of a schedule slot:
// "activity-{activityID}:{scheduledFor}" with the time written as Python's
// datetime.isoformat() writes an aware time ("2026-03-01T09:00:00+00:00"),
// so IDs made by Python services and by idem agree.
func SlotKey(activityID string, scheduledFor time.Time) string {
	return "activity-" + activityID + ":" + isoformat(scheduledFor)
}

// TaskKey returns the ID of the index-th task of a type spawned by a run:
// "task-{runID}:{taskType}:{index}". A replayed run that spawns its tasks
// again gets the same IDs, so nothing is spawned twice.
func TaskKey(runID, taskType string, index int) string {
	return "task-" + runID + ":" + taskType + ":" + strconv.Itoa(index)
}

// isoformat writes t like Python's isoformat(): seconds always, six digits
// of microseconds only when there are any, and the offset as +HH:MM.
func isoformat(t time.Time) string {
	if t.Nanosecond()/1000 != 0 {
		return t.Format("2006-01-02T15:04:05.000000-07:00")
	}
	return t.Format("2006-01-02T15:04:05-07:00")
}
