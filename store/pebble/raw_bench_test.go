package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

// The engine benchmarks run the writes of a durable reserve+complete pair on
// the bare engines, without the store's record logic: per pair, two
// check-then-writes, each a read and then one synced commit; the first sets
// a record and its expiry-index key (as Reserve does), the second sets the
// record and moves its index key (as Complete does). They are the baseline
// the store is measured against, and the measurement behind the choice of
// Pebble (see doc.go).

// rawValue is as long as the store's encoded record in BenchmarkStore.
var rawValue = func() []byte {
	r := localtest.BenchRequest(0, 0).Record
	r.Value = localtest.BenchValue
	return make([]byte, len(encodeRecord(&r, meta{})))
}()

// benchKeys returns a pair's record key and its two expiry-index keys, laid
// out as the store's: a SHA-256 in hex, so spread over the key space as the
// store's are. run is unique per benchmark run so that reruns with a larger
// b.N start on absent keys.
func benchKeys(run, i uint64) (rec, exp1, exp2 []byte) {
	h := store.HashKey(fmt.Sprint(run), fmt.Sprint(i))
	rec = append([]byte("r/"), h...)
	now := uint64(time.Now().UnixNano())
	exp1 = append(binary.BigEndian.AppendUint64([]byte("x/"), now), h...)
	exp2 = append(binary.BigEndian.AppendUint64([]byte("x/"), now+1), h...)
	return rec, exp1, exp2
}

var benchRun atomic.Uint64

// pebblePairs returns the raw Pebble pair: under a striped mutex, a Get
// then a batch committed with pebble.Sync; twice per pair.
func pebblePairs(b *testing.B) func(i uint64) error {
	db, err := pebble.Open(b.TempDir(), engineOptions(nil, quietPebble{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	var stripes [1024]sync.Mutex
	seed := maphash.MakeSeed()
	run := benchRun.Add(1)
	write := func(rec, del, exp []byte) error {
		mu := &stripes[maphash.Bytes(seed, rec)%uint64(len(stripes))]
		mu.Lock()
		defer mu.Unlock()
		if _, c, err := db.Get(rec); err == nil {
			c.Close()
		} else if !errors.Is(err, pebble.ErrNotFound) {
			return err
		}
		batch := db.NewBatch()
		defer batch.Close()
		_ = batch.Set(rec, rawValue, nil)
		if del != nil {
			_ = batch.Delete(del, nil)
		}
		_ = batch.Set(exp, nil, nil)
		return batch.Commit(pebble.Sync)
	}
	return func(i uint64) error {
		rec, exp1, exp2 := benchKeys(run, i)
		if err := write(rec, nil, exp1); err != nil {
			return err
		}
		return write(rec, exp1, exp2)
	}
}

// BenchmarkBolt: the check and write inside one bbolt transaction.
// "update" commits each alone (db.Update: no group commit); "batch" groups
// them with db.Batch at its defaults (waits up to MaxBatchDelay, 10 ms, for
// MaxBatchSize, 1000, calls); "batch64" with MaxBatchSize 64, the best a
// store that cannot know its concurrency could pick.
func BenchmarkBolt(b *testing.B) {
	for _, mode := range []string{"update", "batch", "batch64"} {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/c%d", mode, conc), func(b *testing.B) {
				db, err := bolt.Open(b.TempDir()+"/bolt.db", 0o600, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				if err := db.Update(func(tx *bolt.Tx) error {
					_, err := tx.CreateBucket([]byte("r"))
					return err
				}); err != nil {
					b.Fatal(err)
				}
				commit := db.Update
				switch mode {
				case "batch":
					commit = db.Batch
				case "batch64":
					commit, db.MaxBatchSize = db.Batch, 64
				}
				run := benchRun.Add(1)
				write := func(rec, del, exp []byte) error {
					return commit(func(tx *bolt.Tx) error {
						bk := tx.Bucket([]byte("r"))
						_ = bk.Get(rec)
						if err := bk.Put(rec, rawValue); err != nil {
							return err
						}
						if del != nil {
							if err := bk.Delete(del); err != nil {
								return err
							}
						}
						return bk.Put(exp, []byte{})
					})
				}
				storetest.RunRate(b, conc, "pairs/s", func(i uint64) error {
					rec, exp1, exp2 := benchKeys(run, i)
					if err := write(rec, nil, exp1); err != nil {
						return err
					}
					return write(rec, exp1, exp2)
				})
			})
		}
	}
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
