package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

func TestZZStages(t *testing.T) {
	pool, peerPool := testPool(t, 8), testPool(t, 8)
	opts := freshSchema(t, pool)
	a, b := newTestStore(t, pool, opts), newTestStore(t, peerPool, opts)
	ctx := context.Background()
	var dn, dw, dg []time.Duration
	for i := 0; i < 300; i++ {
		kh := store.HashKey("test", "k"+time.Now().String())
		ch, cancel := subscribe(t, b, kh)
		time.Sleep(2 * time.Millisecond)
		t0 := time.Now()
		if err := a.Notify(ctx, "test", kh); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		<-ch
		t2 := time.Now()
		_, _ = b.Get(ctx, "test", kh, t0)
		t3 := time.Now()
		cancel()
		dn, dw, dg = append(dn, t1.Sub(t0)), append(dw, t2.Sub(t0)), append(dg, t3.Sub(t2))
	}
	for _, x := range []struct {
		n string
		d []time.Duration
	}{{"notify rt", dn}, {"notify->wake", dw}, {"get", dg}} {
		slices.Sort(x.d)
		t.Logf("%s: p50 %v p90 %v p99 %v max %v", x.n, x.d[len(x.d)/2], x.d[len(x.d)*9/10], x.d[len(x.d)*99/100], x.d[len(x.d)-1])
	}
}
