package footprint

import "testing"

func TestParseResult(t *testing.T) {
	r, err := parse([]byte("fill: 10 keys\nresult: {\"op\":\"fill\",\"keys\":10,\"seconds\":1.5,\"rss_bytes_per_key\":52.5}\n"))
	if err != nil || r.Op != "fill" || r.Keys != 10 || r.Seconds != 1.5 || r.RSSPerKey != 52.5 {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := parse([]byte("fill: crashed\n")); err == nil {
		t.Fatal("output without a result line parsed")
	}
}

func TestParseChurn(t *testing.T) {
	out := `=== RUN   TestChurnRatios
    churn_test.go:101: TTL 2s: 98991 pairs (12374/s); log/live at most 1.74 after a Cleanup, 1.71 before one; at the end 12 MiB for 7 MiB live
    churn_test.go:101: TTL 5s: 240690 pairs (12034/s); log/live at most 2.04 after a Cleanup, 1.97 before one; at the end 32 MiB for 17 MiB live
--- PASS: TestChurnRatios (88.02s)
`
	cs := parseChurn(out)
	if len(cs) != 2 || cs[0].TTL != "2s" || cs[0].Pairs != 98991 || cs[0].After != 1.74 || cs[1].Before != 1.97 || cs[0].Cleanup != "every second" {
		t.Fatalf("%+v", cs)
	}
	// The form with and without Cleanup.
	out = `    churn_test.go:132: Cleanup true, TTL 2s: 39478 pairs (4934/s); log/live at most 1.66 after a Cleanup (or a sample), 1.65 before one; at the end 12 MiB for 7 MiB live
    churn_test.go:132: Cleanup false, TTL 15s: 186873 pairs (3114/s); log/live at most 2.54 after a Cleanup (or a sample), 2.49 before one; at the end 80 MiB for 40 MiB live
`
	cs = parseChurn(out)
	if len(cs) != 2 || cs[0].Cleanup != "every second" || cs[1].Cleanup != "none" || cs[1].TTL != "15s" || cs[1].Pairs != 186873 || cs[1].After != 2.54 || cs[1].Before != 2.49 {
		t.Fatalf("%+v", cs)
	}
}
