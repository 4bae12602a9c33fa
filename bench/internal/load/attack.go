package load

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idem-dev/idem/bench/internal/app"
)

// NewClient returns the HTTP client of one contender's attacks. Sharing it
// between the warm-up and the measured run keeps their connections, as
// wrk's fixed set of connections does.
func NewClient(conns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		// A redirect would be a bug of the contender: report it as is.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Attack sends tr's targets as fast as workers concurrent requests allow
// for d (every worker sends its next request when its last one is
// answered), or until tr runs out when d is 0.
func Attack(client *http.Client, tr vegeta.Targeter, workers int, d time.Duration) *vegeta.Metrics {
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(workers)),
		vegeta.MaxWorkers(uint64(workers)),
		vegeta.MaxBody(64<<10),
	)
	var m vegeta.Metrics
	for r := range atk.Attack(tr, vegeta.Rate{Freq: 0}, d, "") {
		// A finite targeter ends with one such result per worker: it
		// is the end of the targets, not a request.
		if r.Error == vegeta.ErrNoTargets.Error() {
			continue
		}
		m.Add(r)
	}
	m.Close()
	return &m
}

// Counts reads the executions counted by the process that runs the
// operation (the upstream, or the contender itself).
func Counts(baseURL string, perKey bool) (app.Counts, error) {
	var c app.Counts
	u := baseURL + app.PathCounts
	if perKey {
		u += "?per_key=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// ResetCounts forgets the executions counted so far.
func ResetCounts(baseURL string) error {
	resp, err := http.Post(baseURL+app.PathReset, "", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", baseURL+app.PathReset, resp.Status)
	}
	return nil
}
