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
	if len(cs) != 2 || cs[0].TTL != "2s" || cs[0].Pairs != 98991 || cs[0].After != 1.74 || cs[1].Before != 1.97 {
		t.Fatalf("%+v", cs)
	}
}
